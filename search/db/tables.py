"""Every table hpsearch reads or writes, declared once (SQLAlchemy Core).

Optuna's tables are declared with the columns hpsearch uses, as Optuna's RDB storage creates them
(``optuna/storages/_rdb/models.py``): hpsearch writes trials in Optuna's own schema, so that
``optuna.load_study`` and optuna-dashboard read them unchanged. hpsearch's own tables (workers,
trial leases, artifacts) are created by the Alembic migrations (the repository's top-level
``migrations/``) and are written here in schema `OUR_SCHEMA`; where that schema really is
(``hpsearch`` on PostgreSQL, none on SQLite) is decided in one place, the engine's
``schema_translate_map`` (`search.db.storage`).

Optuna's enums (trial state, value types) are PostgreSQL ENUM types; the columns are declared
with them, so that bound values are cast to the right type.

Example::

    >>> print(sa.select(trials.c.number).where(trials.c.state == "WAITING"))
    SELECT trials.number
    FROM trials
    WHERE trials.state = :state_1
"""

from __future__ import annotations

import math

import sqlalchemy as sa

__all__ = [
    "FINISHED_STATES",
    "OUR_SCHEMA",
    "artifacts",
    "metadata",
    "sampling_locks",
    "stored_float",
    "studies",
    "study_budgets",
    "study_system_attributes",
    "trial_intermediate_values",
    "trial_leases",
    "trial_params",
    "trial_rungs",
    "trial_system_attributes",
    "trial_user_attributes",
    "trial_values",
    "trials",
    "value_kind",
    "workers",
]

OUR_SCHEMA = "hpsearch"
"""Schema of hpsearch's own tables as written in statements; translated per database."""

FINISHED_STATES = ("COMPLETE", "PRUNED", "FAIL")

metadata = sa.MetaData()

_TRIAL_STATE = sa.Enum(
    "RUNNING", "COMPLETE", "PRUNED", "FAIL", "WAITING", name="trialstate", create_type=False
)
_VALUE_TYPE = sa.Enum("FINITE", "INF_POS", "INF_NEG", name="trialvaluetype", create_type=False)
_INTERMEDIATE_VALUE_TYPE = sa.Enum(
    "FINITE", "INF_POS", "INF_NEG", "NAN", name="trialintermediatevaluetype", create_type=False
)
_KEY = sa.String(512)  # Optuna's MAX_INDEXED_STRING_LENGTH
_FLOAT = sa.Float(precision=53)  # Optuna's FLOAT_PRECISION: a double

# -- Optuna's tables (created and upgraded by Optuna's own migrations) --------------------------


def _attribute_table(name: str, owner: str) -> sa.Table:
    """One of Optuna's four attribute tables: a JSON value per (study or trial, key)."""
    parent = "studies" if owner == "study" else "trials"
    return sa.Table(
        name,
        metadata,
        sa.Column(f"{name.removesuffix('s')}_id", sa.Integer, primary_key=True),
        sa.Column(f"{owner}_id", sa.Integer, sa.ForeignKey(f"{parent}.{owner}_id")),
        sa.Column("key", _KEY),
        sa.Column("value_json", sa.Text),
        sa.UniqueConstraint(f"{owner}_id", "key"),
    )


studies = sa.Table(
    "studies",
    metadata,
    sa.Column("study_id", sa.Integer, primary_key=True),
    sa.Column("study_name", _KEY, nullable=False, unique=True),
)

study_system_attributes = _attribute_table("study_system_attributes", "study")

study_user_attributes = _attribute_table("study_user_attributes", "study")

trials = sa.Table(
    "trials",
    metadata,
    sa.Column("trial_id", sa.Integer, primary_key=True),
    sa.Column("number", sa.Integer),
    sa.Column("study_id", sa.Integer, sa.ForeignKey("studies.study_id"), index=True),
    sa.Column("state", _TRIAL_STATE, nullable=False),
    sa.Column("datetime_start", sa.DateTime),
    sa.Column("datetime_complete", sa.DateTime),
)

trial_params = sa.Table(
    "trial_params",
    metadata,
    sa.Column("param_id", sa.Integer, primary_key=True),
    sa.Column("trial_id", sa.Integer, sa.ForeignKey("trials.trial_id")),
    sa.Column("param_name", _KEY),
    sa.Column("param_value", _FLOAT),
    sa.Column("distribution_json", sa.Text),
    sa.UniqueConstraint("trial_id", "param_name"),
)

trial_values = sa.Table(
    "trial_values",
    metadata,
    sa.Column("trial_value_id", sa.Integer, primary_key=True),
    sa.Column("trial_id", sa.Integer, sa.ForeignKey("trials.trial_id"), nullable=False),
    sa.Column("objective", sa.Integer, nullable=False),
    sa.Column("value", _FLOAT),
    sa.Column("value_type", _VALUE_TYPE, nullable=False),
    sa.UniqueConstraint("trial_id", "objective"),
)

trial_intermediate_values = sa.Table(
    "trial_intermediate_values",
    metadata,
    sa.Column("trial_intermediate_value_id", sa.Integer, primary_key=True),
    sa.Column("trial_id", sa.Integer, sa.ForeignKey("trials.trial_id"), nullable=False),
    sa.Column("step", sa.Integer, nullable=False),
    sa.Column("intermediate_value", _FLOAT),
    sa.Column("intermediate_value_type", _INTERMEDIATE_VALUE_TYPE, nullable=False),
    sa.UniqueConstraint("trial_id", "step"),
)

trial_user_attributes = _attribute_table("trial_user_attributes", "trial")

trial_system_attributes = _attribute_table("trial_system_attributes", "trial")

# -- hpsearch's tables (migrations/versions/) ----------------------------------------------------

workers = sa.Table(
    "workers",
    metadata,
    sa.Column("worker_id", sa.String(64), primary_key=True),
    sa.Column("study_id", sa.Integer, nullable=False),
    sa.Column("hostname", sa.String(255), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("device", sa.String(255), nullable=False),
    # Times are the database's clock, in seconds since the epoch.
    sa.Column("started_at", _FLOAT, nullable=False),
    sa.Column("heartbeat_at", _FLOAT, nullable=False),
    sa.Column("grace_s", _FLOAT, nullable=False, doc="silence after which it counts as dead"),
    sa.Column("stopped_at", _FLOAT),
    sa.Column("stop_reason", sa.String(255)),
    sa.Column("launched_by", sa.Text, doc="JSON: the Slurm job or Kubernetes pod, if any"),
    schema=OUR_SCHEMA,
)

trial_leases = sa.Table(
    "trial_leases",
    metadata,
    sa.Column("trial_id", sa.Integer, primary_key=True),
    sa.Column("study_id", sa.Integer, nullable=False),
    sa.Column("worker_id", sa.String(64), doc="the holder; NULL while the trial is queued"),
    sa.Column("generation", sa.Integer, nullable=False, doc="fencing token, +1 per claim"),
    sa.Column("claimed_at", _FLOAT),
    sa.Column("epoch", sa.Integer, nullable=False, doc="the last epoch the holder reported"),
    sa.Column("last_worker_id", sa.String(64), doc="who held it before it was queued again"),
    schema=OUR_SCHEMA,
)

sampling_locks = sa.Table(
    "sampling_locks",
    metadata,
    sa.Column("study_id", sa.Integer, primary_key=True),
    sa.Column("holder", sa.String(64), doc="the worker sampling now; NULL: nobody"),
    sa.Column("taken_at", _FLOAT),
    schema=OUR_SCHEMA,
)

artifacts = sa.Table(
    "artifacts",
    metadata,
    sa.Column("artifact_id", sa.String(128), primary_key=True),
    sa.Column("chunk", sa.Integer, primary_key=True),
    sa.Column("data", sa.LargeBinary, nullable=False),
    sa.Column("trial_id", sa.Integer, doc="the trial a checkpoint is of (deleted with it)"),
    schema=OUR_SCHEMA,
)

study_budgets = sa.Table(
    "study_budgets",
    metadata,
    sa.Column("study_id", sa.Integer, primary_key=True),
    sa.Column("epochs_used", sa.Integer, nullable=False, doc="epochs reserved by workers"),
    schema=OUR_SCHEMA,
)

trial_rungs = sa.Table(
    "trial_rungs",
    metadata,
    sa.Column("trial_id", sa.Integer, primary_key=True),
    sa.Column("level", sa.Integer, primary_key=True, doc="the rung, in epochs"),
    sa.Column("study_id", sa.Integer, nullable=False),
    sa.Column("bracket", sa.Integer, nullable=False),
    sa.Column("value", _FLOAT, doc="the trial's value at the rung (NULL: NaN)"),
    sa.Column("paused", sa.Boolean, nullable=False, doc="the trial sits paused at this rung"),
    schema=OUR_SCHEMA,
)


# -- Optuna's encoding of non-finite values -------------------------------------------------------


def value_kind(value: float) -> str:
    """Optuna's value type for a float: FINITE, INF_POS, INF_NEG or NAN (stored with NULL)."""
    if math.isnan(value):
        return "NAN"
    if math.isinf(value):
        return "INF_POS" if value > 0 else "INF_NEG"
    return "FINITE"


def stored_float(value: float | None, kind: str) -> float:
    """The float a stored (value, value type) pair stands for: `value_kind` undone."""
    special = {"INF_POS": math.inf, "INF_NEG": -math.inf, "NAN": math.nan}
    return special[kind] if kind in special else float(value)  # type: ignore[arg-type]
