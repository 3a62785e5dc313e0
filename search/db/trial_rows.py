"""Creating a study's trial rows, for the samplers, one process at a time.

Trials are created by whichever worker holds the study's sampling lock (`sampling_lock`: a row
naming its holder, free again once the holder stops or is no longer alive). The lock holder
counts the study's trials before creating one, so a study never has more than `n_trials`
trials however many workers run (numbers are counted, as Optuna does).

Two ways in:

- `create_sampled_trials`: trials whose params need no history (random search), written whole
  (a transaction-scoped lock, count, trials and params) in one transaction;
- `insert_sampled_trials`: trials sampled in memory (`search.sampling.mirror`: TPE, CMA-ES, GP),
  with their params and the samplers' system attributes, in one transaction, WAITING at once;
- `create_trial` then `enqueue_sampled`: a RUNNING row under the sampler's lease while Optuna's
  sampler fills its params (a real ``optuna.Trial``), then WAITING for any worker. Should the
  sampler die meanwhile, the reaper queues the half-sampled row, and the worker that claims it
  samples the missing params (`search.worker.loop`).

Caveat (as Optuna's GridSampler notes for itself): trials created outside hpsearch (e.g. with
plain ``study.enqueue_trial``) are run by hpsearch workers, but count towards `n_trials`.

A study whose epoch budget is spent gets no new trial: the first two ways check the budget's
counter in the transaction that inserts, under a lock on its row that the end of the study
(`search.db.pauses.end_waiting`) takes too, so that a trial sampled ahead is either in before
that cleanup (which removes it) or never inserted; none is left WAITING after the study's end.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import sqlalchemy as sa
from optuna.distributions import BaseDistribution, distribution_to_json
from optuna.trial import FrozenTrial
from sqlalchemy.engine import Connection

from search.db.claims import utcnow_naive
from search.db.liveness import live_workers_clause
from search.db.statements import LOCK_CLASS, db_now, insert_for
from search.db.storage import Storage
from search.db.tables import (
    FINISHED_STATES,
    sampling_locks,
    study_budgets,
    trial_leases,
    trial_params,
    trial_rungs,
    trial_system_attributes,
    trial_user_attributes,
    trials,
    workers,
)

__all__ = [
    "Counts",
    "SampledTrial",
    "count_trials",
    "create_sampled_trials",
    "create_trial",
    "enqueue_sampled",
    "insert_sampled_trials",
    "lock_budget",
    "remove_unsampled",
    "sampling_lock",
]


class SampledTrial:
    """A trial sampled in memory, to be inserted: its number, params and system attributes."""

    __slots__ = ("distributions", "number", "params", "system_attrs")

    def __init__(self, trial: FrozenTrial) -> None:
        self.number = trial.number
        self.params = {
            name: trial.distributions[name].to_internal_repr(value)
            for name, value in trial.params.items()
        }
        self.distributions: dict[str, BaseDistribution] = dict(trial.distributions)
        self.system_attrs = dict(trial.system_attrs)


@dataclass(frozen=True)
class Counts:
    """Trials of a study by state."""

    by_state: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(n for state, n in self.by_state.items() if state != "PAUSED")

    @property
    def finished(self) -> int:
        return sum(self.by_state.get(s, 0) for s in FINISHED_STATES)

    @property
    def waiting(self) -> int:
        """WAITING trials, paused ones included."""
        return self.by_state.get("WAITING", 0)

    @property
    def paused(self) -> int:
        """WAITING trials that sit paused at a rung (promotion, `search.db.pauses`)."""
        return self.by_state.get("PAUSED", 0)

    @property
    def queued(self) -> int:
        """WAITING trials any worker may claim: not paused."""
        return self.waiting - self.paused

    @property
    def running(self) -> int:
        return self.by_state.get("RUNNING", 0)


def count_trials(storage: Storage, study_id: int) -> Counts:
    with storage.autocommit() as conn:
        return _counts(conn, study_id)


@contextlib.contextmanager
def sampling_lock(storage: Storage, study_id: int, worker_id: str) -> Iterator[bool]:
    """Try to become the study's one sampler; yields whether this worker got the lock.

    The lock is a row (`sampling_locks`) naming its holder, taken with one statement, and
    free when the holder releases it or stops being alive (`search.db.liveness`): a lock of
    the database's own (a PostgreSQL session advisory lock) would not hold through PgBouncer
    in transaction pooling, where consecutive statements may run on different server
    connections. `worker_id` must be registered (`liveness.register`).
    """
    got = _take_lock(storage, study_id, worker_id)
    try:
        yield got
    finally:
        if got:
            with storage.autocommit() as conn:
                conn.execute(
                    sa.update(sampling_locks)
                    .where(
                        sampling_locks.c.study_id == study_id, sampling_locks.c.holder == worker_id
                    )
                    .values(holder=None)
                )


def create_sampled_trials(
    storage: Storage,
    study_id: int,
    params_for: Callable[[int], dict[str, tuple[float, str]]],
    how_many: Callable[[Counts, int], int],
    budget_epochs: int | None = None,
) -> int:
    """Top the queue up with trials whose params need no history (random search), in one
    transaction on one connection: take the sampling lock for the transaction, count, insert
    `how_many(counts, live workers)` WAITING trials with their params (none once the study's
    `budget_epochs` are spent).

    `params_for`: trial number -> {name: (internal value, distribution JSON)}. Returns how many
    trials were created (0 if another process holds the sampling lock).
    """
    with storage.transaction() as conn:
        # SQLite's BEGIN IMMEDIATE already excludes every other writer.
        if (
            storage.is_postgres
            and not conn.execute(
                sa.select(sa.func.pg_try_advisory_xact_lock(LOCK_CLASS, study_id))
            ).scalar_one()
        ):
            return 0
        if _budget_spent(conn, study_id, budget_epochs):
            return 0
        counts = _counts(conn, study_id)
        live = conn.execute(
            sa.select(sa.func.count()).where(
                workers.c.study_id == study_id, live_workers_clause(conn.dialect.name)
            )
        ).scalar_one()
        count = max(0, how_many(counts, live))
        for number in range(counts.total, counts.total + count):
            trial_id = conn.execute(
                sa.insert(trials)
                .values(number=number, study_id=study_id, state="WAITING")
                .returning(trials.c.trial_id)
            ).scalar_one()
            conn.execute(
                sa.insert(trial_params),
                [
                    {
                        "trial_id": trial_id,
                        "param_name": name,
                        "param_value": value,
                        "distribution_json": dist,
                    }
                    for name, (value, dist) in params_for(number).items()
                ],
            )
        return count


def insert_sampled_trials(
    storage: Storage,
    study_id: int,
    worker_id: str,
    sampled: Sequence[SampledTrial],
    n_trials: int,
    budget_epochs: int | None = None,
) -> int:
    """Queue trials sampled in memory, in one transaction: WAITING rows numbered after the
    study's last, their params, and the system attributes their sampler set (TPE's relative
    params, CMA-ES's generation and optimizer state), as Optuna's storage would hold them.

    Call while holding the sampling lock: it is checked again here, under the lock row, and
    never more trials are inserted than `n_trials` allows, none once the study's
    `budget_epochs` are spent. Returns how many were inserted.
    """
    if not sampled:
        return 0
    with storage.transaction() as conn:
        holder = sa.select(sampling_locks.c.holder).where(sampling_locks.c.study_id == study_id)
        if storage.is_postgres:
            holder = holder.with_for_update()
        if conn.execute(holder).scalar() != worker_id:
            return 0  # declared dead meanwhile: another worker samples now
        if _budget_spent(conn, study_id, budget_epochs):
            return 0
        room = n_trials - _counts(conn, study_id).total
        params, attrs = [], []
        for trial in sampled[: max(0, room)]:
            trial_id = conn.execute(
                _create_trial_statement(),
                {"study": study_id, "state": "WAITING", "now": None},
            ).scalar_one()
            params += [
                {
                    "trial_id": trial_id,
                    "param_name": name,
                    "param_value": value,
                    "distribution_json": distribution_to_json(trial.distributions[name]),
                }
                for name, value in trial.params.items()
            ]
            attrs += [
                {"trial_id": trial_id, "key": key, "value_json": json.dumps(value)}
                for key, value in trial.system_attrs.items()
            ]
        if params:
            conn.execute(sa.insert(trial_params), params)
        if attrs:
            conn.execute(sa.insert(trial_system_attributes), attrs)
    return max(0, min(room, len(sampled)))


def create_trial(storage: Storage, study_id: int, worker_id: str) -> tuple[int, int]:
    """Insert the study's next trial, to be sampled through Optuna by this worker and then
    `enqueue_sampled`. It is RUNNING under this worker's lease meanwhile: nobody claims it
    half sampled, and should this worker die now, the reaper queues it again.

    Call only while holding the sampling lock. Returns (trial id, number).
    """
    with storage.transaction() as conn:
        row = conn.execute(
            _create_trial_statement(),
            {"study": study_id, "state": "RUNNING", "now": utcnow_naive()},
        ).one()
        conn.execute(
            sa.insert(trial_leases).values(
                trial_id=row.trial_id,
                study_id=study_id,
                worker_id=worker_id,
                generation=0,
                claimed_at=db_now(conn.dialect.name),
                epoch=0,
            )
        )
    return row.trial_id, row.number


def enqueue_sampled(storage: Storage, trial_id: int) -> None:
    """Make a freshly sampled trial claimable, unless it is no longer this sampling's: its
    worker was declared dead meanwhile, the reaper queued it again and another worker may have
    claimed it (a lease generation above 0), which must go on holding and running it alone."""
    with storage.transaction() as conn:
        # The trial's row first, as the claim and the reaper lock it, then its lease.
        state = sa.select(trials.c.state).where(trials.c.trial_id == trial_id)
        if storage.is_postgres:
            state = state.with_for_update()
        generation = sa.select(trial_leases.c.generation).where(trial_leases.c.trial_id == trial_id)
        if conn.execute(state).scalar() != "RUNNING" or conn.execute(generation).scalar() != 0:
            return
        conn.execute(
            sa.update(trials)
            .where(trials.c.trial_id == trial_id)
            .values(state="WAITING", datetime_start=None)
        )
        conn.execute(
            sa.update(trial_leases)
            .where(trial_leases.c.trial_id == trial_id)
            .values(worker_id=None)
        )


def remove_unsampled(storage: Storage, trial_id: int) -> None:
    """Delete a trial row whose sampling failed (created by `create_trial`, never enqueued):
    a trial exists only with its params. Call while holding the sampling lock, so that it is
    the study's last trial and the numbers stay contiguous."""
    with storage.transaction() as conn:
        for table in (trial_params, trial_system_attributes, trial_user_attributes):
            conn.execute(sa.delete(table).where(table.c.trial_id == trial_id))
        conn.execute(sa.delete(trial_leases).where(trial_leases.c.trial_id == trial_id))
        conn.execute(
            sa.delete(trials).where(trials.c.trial_id == trial_id, trials.c.state == "RUNNING")
        )


def lock_budget(conn: Connection, study_id: int, *, exclusive: bool) -> int | None:
    """The study's epochs used (None: it has no budget counter), its counter row locked till
    the end of the transaction on PostgreSQL (SQLite's BEGIN IMMEDIATE already serializes
    writers): shared by inserts of new trials, exclusive for the end of the study."""
    statement = sa.select(study_budgets.c.epochs_used).where(study_budgets.c.study_id == study_id)
    if conn.dialect.name == "postgresql":
        statement = statement.with_for_update(read=not exclusive)
    return conn.execute(statement).scalar()


def _budget_spent(conn: Connection, study_id: int, budget_epochs: int | None) -> bool:
    if budget_epochs is None:
        return False
    used = lock_budget(conn, study_id, exclusive=False)
    return used is not None and used >= budget_epochs


def _counts(conn: Connection, study_id: int) -> Counts:
    rows = conn.execute(_counts_statement(), {"study": study_id}).all()
    return Counts({str(state): n for state, n in rows})


def _take_lock(storage: Storage, study_id: int, worker_id: str) -> bool:
    """Take the study's sampling lock if nobody alive holds it."""
    locks = sampling_locks
    with storage.transaction() as conn:
        dialect = conn.dialect.name
        current = sa.select(locks.c.holder).where(locks.c.study_id == study_id)
        if dialect == "postgresql":  # SQLite's BEGIN IMMEDIATE already serializes this
            # The lock row alone: joined to its holder's row, a concurrent taker would see the
            # new holder with the old (NULL) join partner after waiting, and take it too.
            current = current.with_for_update()
        row = conn.execute(current).first()
        if row is None:  # the study's first sampler: whoever inserts the row first has it
            insert = insert_for(dialect, locks).values(
                study_id=study_id, holder=worker_id, taken_at=db_now(dialect)
            )
            taken = conn.execute(
                insert.on_conflict_do_nothing(index_elements=[locks.c.study_id]).returning(
                    locks.c.holder
                )
            ).first()
            return taken is not None
        holder = row.holder
        if (
            holder is not None
            and conn.execute(
                sa.select(sa.literal(1)).where(
                    workers.c.worker_id == holder, live_workers_clause(dialect)
                )
            ).first()
        ):
            return False  # held by a live worker (this one too: its other thread)
        conn.execute(
            sa.update(locks)
            .where(locks.c.study_id == study_id)
            .values(holder=worker_id, taken_at=db_now(dialect))
        )
        return True


@functools.cache
def _counts_statement() -> sa.CompoundSelect:
    # Paused trials (WAITING in Optuna's table) come in the same round trip, as "PAUSED".
    paused = sa.select(
        sa.cast(sa.literal("PAUSED"), sa.String).label("state"), sa.func.count()
    ).where(trial_rungs.c.study_id == sa.bindparam("study"), trial_rungs.c.paused.is_(True))
    by_state = (
        sa.select(sa.cast(trials.c.state, sa.String).label("state"), sa.func.count())
        .where(trials.c.study_id == sa.bindparam("study"))
        .group_by(trials.c.state)
    )
    return sa.union_all(by_state, paused)


@functools.cache
def _create_trial_statement() -> sa.Insert:
    # The number is counted in the same statement (callers hold the sampling lock).
    next_number = (
        sa.select(sa.func.count())
        .where(trials.c.study_id == sa.bindparam("study"))
        .scalar_subquery()
    )
    return (
        sa.insert(trials)
        .values(
            number=next_number,
            study_id=sa.bindparam("study"),
            state=sa.bindparam("state", type_=trials.c.state.type),
            datetime_start=sa.bindparam("now", type_=sa.DateTime),
        )
        .returning(trials.c.trial_id, trials.c.number)
    )
