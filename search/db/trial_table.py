"""Every trial of a study as one row each (`hpsearch trials`, `best`, `export --to csv`): state
(paused trials apart from queued ones), value, epochs and rung reached, params, who trained it
and when, read in one read-only transaction.

A trial's value is its final value when it finished, else its last reported one (a running or
paused trial's latest score). Its worker is the lease holder while it runs, else the worker that
recorded its provenance (``worker_id``), else the last one that held it.
"""

from __future__ import annotations

import datetime
import json
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from search.db.checkpoint_pointers import POINTER_ATTR
from search.db.storage import Storage
from search.db.tables import (
    trial_intermediate_values,
    trial_leases,
    trial_params,
    trial_rungs,
    trial_system_attributes,
    trial_user_attributes,
    trial_values,
    trials,
)
from search.db.trial_changes import param_value

__all__ = ["STATES", "TrialRow", "best_row", "leading_paused", "read_trials"]

STATES = ("COMPLETE", "PRUNED", "FAIL", "RUNNING", "WAITING", "PAUSED")
"""A trial's state as hpsearch shows it: Optuna's, with PAUSED for a trial waiting at a rung
(Optuna's WAITING) apart from the queued ones."""

_USER_KEYS = ("hostname", "worker_id", "epochs_trained", "resumed_from", "device_name")


@dataclass(frozen=True)
class TrialRow:
    """One trial of a study."""

    trial_id: int
    number: int
    state: str
    value: float | None
    epoch: int | None
    """The last epoch it reported (None: none yet)."""
    rung: int | None
    """The highest rung (epochs) it reached under promotion-based ASHA; None otherwise."""
    params: dict[str, Any]
    worker: str | None
    hostname: str | None
    epochs_trained: int | None
    resumed_from: dict[str, Any] | None
    started: datetime.datetime | None
    completed: datetime.datetime | None
    ended_by: str | None = None
    """Why a trial that did not finish its epochs ended: "budget" or "n_trials" (study end)."""
    has_checkpoint: bool = False
    user_attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return self.state in ("COMPLETE", "PRUNED", "FAIL")


def read_trials(storage: Storage, study_id: int) -> list[TrialRow]:
    """Every trial of the study, by number."""
    t, p, v, iv = trials, trial_params, trial_values, trial_intermediate_values
    ua, sa_, lease, r = trial_user_attributes, trial_system_attributes, trial_leases, trial_rungs
    in_study = sa.select(t.c.trial_id).where(t.c.study_id == study_id).scalar_subquery()
    with storage.read() as conn:
        rows = conn.execute(
            sa.select(
                t.c.trial_id, t.c.number, t.c.state, t.c.datetime_start, t.c.datetime_complete
            )
            .where(t.c.study_id == study_id)
            .order_by(t.c.number)
        ).all()
        params: dict[int, dict[str, Any]] = defaultdict(dict)
        for trial_id, name, value, dist in conn.execute(
            sa.select(p.c.trial_id, p.c.param_name, p.c.param_value, p.c.distribution_json)
            .where(p.c.trial_id.in_(in_study))
            .order_by(p.c.param_id)
        ):
            params[trial_id][name] = param_value(value, dist)
        values = {
            trial_id: value
            for trial_id, value in conn.execute(
                sa.select(v.c.trial_id, v.c.value).where(
                    v.c.trial_id.in_(in_study), v.c.objective == 0
                )
            )
        }
        last = (
            sa.select(iv.c.trial_id, sa.func.max(iv.c.step).label("step"))
            .where(iv.c.trial_id.in_(in_study))
            .group_by(iv.c.trial_id)
            .subquery()
        )
        reported = {
            trial_id: (step, value)
            for trial_id, step, value in conn.execute(
                sa.select(iv.c.trial_id, iv.c.step, iv.c.intermediate_value).join(
                    last, sa.and_(iv.c.trial_id == last.c.trial_id, iv.c.step == last.c.step)
                )
            )
        }
        user: dict[int, dict[str, Any]] = defaultdict(dict)
        for trial_id, key, value in conn.execute(
            sa.select(ua.c.trial_id, ua.c.key, ua.c.value_json).where(ua.c.trial_id.in_(in_study))
        ):
            user[trial_id][key] = json.loads(value)
        system: dict[int, dict[str, Any]] = defaultdict(dict)
        for trial_id, key, value in conn.execute(
            sa.select(sa_.c.trial_id, sa_.c.key, sa_.c.value_json).where(
                sa_.c.trial_id.in_(in_study),
                sa_.c.key.in_([POINTER_ATTR, "hpsearch:ended_by", "fixed_params"]),
            )
        ):
            system[trial_id][key] = json.loads(value)
        holders = {
            trial_id: (worker, last_worker)
            for trial_id, worker, last_worker in conn.execute(
                sa.select(lease.c.trial_id, lease.c.worker_id, lease.c.last_worker_id).where(
                    lease.c.study_id == study_id
                )
            )
        }
        rungs: dict[int, tuple[int, bool]] = {}
        for trial_id, level, paused in conn.execute(
            sa.select(r.c.trial_id, r.c.level, r.c.paused).where(r.c.study_id == study_id)
        ):
            top, was_paused = rungs.get(trial_id, (-1, False))
            rungs[trial_id] = (max(top, level), was_paused or bool(paused))
    return [_row(row, params, values, reported, user, system, holders, rungs) for row in rows]


def _row(
    row: Any,
    params: dict[int, dict[str, Any]],
    values: dict[int, float],
    reported: dict[int, tuple[int, float]],
    user: dict[int, dict[str, Any]],
    system: dict[int, dict[str, Any]],
    holders: dict[int, tuple[str | None, str | None]],
    rungs: dict[int, tuple[int, bool]],
) -> TrialRow:
    trial_id = row.trial_id
    state = str(row.state.name if hasattr(row.state, "name") else row.state)
    rung, paused = rungs.get(trial_id, (None, False))
    if state == "WAITING" and paused:
        state = "PAUSED"
    step, last_value = reported.get(trial_id, (None, None))
    value = values.get(trial_id)
    if value is None and state not in ("COMPLETE", "PRUNED", "FAIL"):
        value = last_value
    attrs = user.get(trial_id, {})
    holder, last_holder = holders.get(trial_id, (None, None))
    worker = holder if state == "RUNNING" and holder else attrs.get("worker_id") or last_holder
    return TrialRow(
        trial_id=trial_id,
        number=row.number,
        state=state,
        value=None if value is None or math.isnan(value) else float(value),
        epoch=step,
        rung=None if rung is None or rung < 0 else rung,
        # A trial enqueued with fixed params has them in its attributes until it is claimed.
        params=params.get(trial_id) or dict(system.get(trial_id, {}).get("fixed_params") or {}),
        worker=worker,
        hostname=attrs.get("hostname"),
        epochs_trained=attrs.get("epochs_trained"),
        resumed_from=attrs.get("resumed_from"),
        started=row.datetime_start,
        completed=row.datetime_complete,
        ended_by=system.get(trial_id, {}).get("hpsearch:ended_by"),
        has_checkpoint=POINTER_ATTR in system.get(trial_id, {}),
        user_attrs=attrs,
    )


def best_row(rows: Sequence[TrialRow], direction: str) -> TrialRow | None:
    """The best COMPLETE trial (pruned, paused or failed ones never are); ties: the first."""
    done = [r for r in rows if r.state == "COMPLETE" and r.value is not None]
    if not done:
        return None
    sign = -1.0 if direction == "maximize" else 1.0
    return min(done, key=lambda r: (sign * r.value, r.number))  # type: ignore[operator]


def leading_paused(
    storage: Storage, study_id: int, direction: str
) -> tuple[int, float, int] | None:
    """(number, value, rung) of the paused trial with the best value at the highest rung any
    paused trial reached: under ASHA the one leading the search before any trial finishes."""
    r = trial_rungs
    best_first = r.c.value.desc() if direction == "maximize" else r.c.value.asc()
    with storage.autocommit() as conn:
        row = conn.execute(
            sa.select(trials.c.number, r.c.value, r.c.level)
            .join(trials, trials.c.trial_id == r.c.trial_id)
            .where(r.c.study_id == study_id, r.c.paused.is_(True), r.c.value.is_not(None))
            .order_by(r.c.level.desc(), best_first, trials.c.number)
            .limit(1)
        ).first()
    return None if row is None else (int(row.number), float(row.value), int(row.level))
