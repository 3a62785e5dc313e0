"""Putting a known configuration next in a study's queue (`hpsearch enqueue`, the config's
``[[study.enqueue]]``).

Workers take the lowest-numbered WAITING trial (`search.db.claims`). A new study's configured
ones are enqueued before its first trials are sampled, so they have the first numbers. A running
study's queue already holds trials sampled ahead (never started, never seen by any worker):
the first of them takes the configuration's params in place of its sampled ones (the params it
does not name keep their sampled values), in one transaction that locks the row, so that it
runs next and the study's trial count does not change. With none queued (or a grid or QMC
sampler, whose queued points are study-wide counters), the configuration is a new trial,
enqueued with Optuna's `enqueue_trial` (the params it does not name are sampled at its claim).
Either way it is one trial: it runs exactly once across the fleet, and the sampler learns from
its result like any trial's.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from optuna.distributions import distribution_to_json

from search.db.statements import delete_system_attr, read_system_attr, upsert_attributes
from search.db.storage import Storage
from search.db.tables import (
    trial_intermediate_values,
    trial_params,
    trial_rungs,
    trial_system_attributes,
    trials,
)

__all__ = ["ENQUEUED_ATTR", "HEDGE_ATTR", "replace_next_queued", "trial_attr"]

ENQUEUED_ATTR = "hpsearch:enqueued"
"""Trial system attribute: the params a user enqueued into this trial."""
HEDGE_ATTR = "hpsearch:hedge"
"""Trial system attribute of a hedged trial (search.sampling.hedge): the epoch it is first
judged at. A trial whose params a user enqueues is no longer a hedge."""


def replace_next_queued(
    storage: Storage, study_id: int, params: dict[str, tuple[float, Any]]
) -> int | None:
    """Give the study's first queued, never-started, sampled trial these params (name ->
    (internal value, Optuna distribution)); returns its number, or None if there is none."""
    t, p, iv, r = trials, trial_params, trial_intermediate_values, trial_rungs
    with storage.transaction() as conn:
        statement = (
            sa.select(t.c.trial_id, t.c.number)
            .where(
                t.c.study_id == study_id,
                t.c.state == "WAITING",
                t.c.datetime_start.is_(None),
                ~sa.exists().where(iv.c.trial_id == t.c.trial_id),
                ~sa.exists().where(r.c.trial_id == t.c.trial_id),
                sa.exists().where(p.c.trial_id == t.c.trial_id),
            )
            .order_by(t.c.number)
            .limit(1)
        )
        if conn.dialect.name == "postgresql":
            statement = statement.with_for_update(skip_locked=True)  # a claim may hold it
        picked = conn.execute(statement).first()
        if picked is None:
            return None
        for name, (value, dist) in params.items():
            updated = conn.execute(
                sa.update(p)
                .where(p.c.trial_id == picked.trial_id, p.c.param_name == name)
                .values(param_value=value, distribution_json=distribution_to_json(dist))
            ).rowcount
            if updated == 0:
                conn.execute(
                    sa.insert(p).values(
                        trial_id=picked.trial_id,
                        param_name=name,
                        param_value=value,
                        distribution_json=distribution_to_json(dist),
                    )
                )
        external = {name: dist.to_external_repr(v) for name, (v, dist) in params.items()}
        upsert_attributes(conn, trial_system_attributes, picked.trial_id, {ENQUEUED_ATTR: external})
        delete_system_attr(conn, picked.trial_id, HEDGE_ATTR)
    return int(picked.number)


def trial_attr(storage: Storage, trial_id: int, key: str) -> Any:
    """A trial's system attribute `key` (its JSON value decoded), or None if it has none."""
    with storage.autocommit() as conn:
        return read_system_attr(conn, trial_id, key)
