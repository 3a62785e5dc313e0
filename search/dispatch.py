"""Handing out trials: a queue of WAITING trials in Optuna's own table, claimed with one statement.

Design (measured in bench/BENCHMARKS.md):

- **Sampling ahead.** Trials are created by one process at a time: whichever worker holds the
  study's sampling lock (a PostgreSQL advisory lock, tied to its connection, so a dead sampler
  frees it at once; a lock file on SQLite) samples a few trials ahead and leaves them WAITING with
  their params. The lock holder counts the study's trials before creating one, so a study never
  has more than `n_trials` trials, however many workers run: nothing to overshoot.
- **Claiming.** A worker takes the lowest-numbered WAITING trial with one
  ``UPDATE ... SKIP LOCKED`` round trip that also writes its lease. Handed-back and orphaned
  trials are WAITING again and keep their number, so they are resumed first.
- **Leases and fencing.** A lease names the worker and a generation that grows with each claim.
  Every write for a trial (report, finish, hand back) checks the lease in the same transaction,
  so a worker that lost its trial (declared dead, then came back) can never overwrite the work of
  the worker that took the trial over.
- **Liveness.** Workers heartbeat into `hpsearch.workers`. A trial whose worker has been silent
  for longer than the grace period that worker declared is handed back (WAITING) by any other
  worker; its params, intermediate values and checkpoint stay, so it resumes where it was. After
  a PostgreSQL restart every worker gets a fresh grace period (the clock restarts at the
  server's start), so an outage never makes live workers look dead.

Everything is written in Optuna's schema (trials, trial_params, trial_intermediate_values,
trial_values, trial user/system attributes), so `optuna.load_study` and optuna-dashboard read
hpsearch studies unchanged. Optuna's own RDBStorage is used for the rare, heavy operations
(sampling, pruning); the per-trial hot path is a handful of plain statements.

Caveat (as Optuna's GridSampler notes for itself): trials created outside hpsearch (e.g. with
plain ``study.enqueue_trial``) are run by hpsearch workers, but count towards `n_trials`.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import logging
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from search.storage import Storage

__all__ = [
    "FINISHED_STATES",
    "Claim",
    "Counts",
    "LeaseLost",
    "Queue",
    "TrialData",
    "now_sql",
]

logger = logging.getLogger("search.dispatch")

FINISHED_STATES = ("COMPLETE", "PRUNED", "FAIL")
_LOCK_CLASS = 0x6870  # "hp": advisory lock namespace, with the study id as the second key


class LeaseLost(Exception):
    """This worker no longer holds the trial: another worker took it over."""


@dataclass(frozen=True)
class Claim:
    """A trial this worker holds."""

    trial_id: int
    number: int
    generation: int
    """Fencing token: writes for the trial succeed only while the lease has this generation."""
    waiting: int | None = field(default=None, compare=False)
    """Trials still queued right after this claim (None: not counted)."""
    loaded: TrialData | None = field(default=None, compare=False, repr=False)
    """The trial's stored data, read by the claim itself (None: not read)."""


@dataclass(frozen=True)
class TrialData:
    """What a worker needs of a trial it claimed, as stored."""

    params: list[tuple[str, float, str]]
    """(name, internal value, distribution JSON) per parameter."""
    steps: list[tuple[int, float | None, str]]
    """(step, value, Optuna's value type) per intermediate value."""
    previous_worker: str | None
    """The worker that held the trial before, if it is resumed."""


@dataclass(frozen=True)
class Counts:
    """Trials of a study by state."""

    by_state: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.by_state.values())

    @property
    def finished(self) -> int:
        return sum(self.by_state.get(s, 0) for s in FINISHED_STATES)

    @property
    def waiting(self) -> int:
        return self.by_state.get("WAITING", 0)

    @property
    def running(self) -> int:
        return self.by_state.get("RUNNING", 0)


def now_sql(conn: Connection) -> str:
    """SQL for the database clock in float seconds since the epoch."""
    if conn.dialect.name == "postgresql":
        return "extract(epoch from clock_timestamp())"
    return "((julianday('now') - 2440587.5) * 86400.0)"


def utcnow_naive() -> datetime.datetime:
    """Optuna stores trial datetimes as naive UTC."""
    return datetime.datetime.now(datetime.UTC).replace(tzinfo=None)


class Queue:
    """One worker's view of one study's trial queue, leases and liveness tables."""

    def __init__(self, storage: Storage, study_id: int, worker_id: str) -> None:
        self.storage = storage
        self.study_id = study_id
        self.worker_id = worker_id
        self._pg = storage.is_postgres
        self._t = "hpsearch." if self._pg else ""  # our tables' schema prefix

    # -- liveness ---------------------------------------------------------------------------

    def register(self, *, hostname: str, pid: int, device: str, grace_s: float) -> None:
        with self.storage.transaction() as conn:
            now = now_sql(conn)
            conn.execute(
                sa.text(
                    f"INSERT INTO {self._t}workers (worker_id, study_id, hostname, pid, device, "
                    "started_at, heartbeat_at, grace_s) "
                    f"VALUES (:w, :s, :h, :p, :d, {now}, {now}, :g)"
                ),
                {
                    "w": self.worker_id,
                    "s": self.study_id,
                    "h": hostname[:255],
                    "p": pid,
                    "d": device[:255],
                    "g": grace_s,
                },
            )

    def heartbeat(self, claim: Claim | None) -> bool:
        """Record that this worker is alive; False if it no longer holds `claim`."""
        with self.storage.transaction() as conn:
            conn.execute(
                sa.text(
                    f"UPDATE {self._t}workers SET heartbeat_at = {now_sql(conn)} "
                    "WHERE worker_id = :w"
                ),
                {"w": self.worker_id},
            )
            return claim is None or self._holds(conn, claim)

    def unregister(self, reason: str) -> None:
        with self.storage.transaction() as conn:
            conn.execute(
                sa.text(
                    f"UPDATE {self._t}workers SET stopped_at = {now_sql(conn)}, stop_reason = :r "
                    "WHERE worker_id = :w"
                ),
                {"w": self.worker_id, "r": reason[:255]},
            )

    def reap(self) -> list[tuple[int, str]]:
        """Hand back the trials of workers silent for longer than their grace period.

        Returns (trial number, dead worker id) of each trial handed back.
        """
        with self.storage.transaction() as conn:
            now = now_sql(conn)
            # A restarted server has seen no heartbeats since it came up: count silence from
            # its start, so live workers get a whole grace period to reconnect.
            since = (
                "greatest(w.heartbeat_at, extract(epoch from pg_postmaster_start_time()))"
                if self._pg
                else "w.heartbeat_at"
            )
            lock = "FOR UPDATE OF t SKIP LOCKED" if self._pg else ""
            rows = conn.execute(
                sa.text(
                    f"SELECT t.trial_id, t.number, l.worker_id FROM trials t "
                    f"JOIN {self._t}trial_leases l ON l.trial_id = t.trial_id "
                    f"JOIN {self._t}workers w ON w.worker_id = l.worker_id "
                    f"WHERE t.study_id = :s AND t.state = 'RUNNING' "
                    f"AND {now} - {since} > w.grace_s {lock}"
                ),
                {"s": self.study_id},
            ).all()
            for trial_id, _number, _worker in rows:
                self._release(conn, trial_id)
            return [(number, worker) for _, number, worker in rows]

    # -- the queue --------------------------------------------------------------------------

    def counts(self) -> Counts:
        with self.storage.autocommit() as conn:
            return self._counts(conn)

    def live_workers(self) -> int:
        """Workers of this study that heartbeat within their grace period."""
        with self.storage.autocommit() as conn:
            return self._live_workers(conn)

    def _counts(self, conn: Connection) -> Counts:
        rows = conn.execute(
            sa.text("SELECT state, count(*) FROM trials WHERE study_id = :s GROUP BY state"),
            {"s": self.study_id},
        ).all()
        return Counts({str(state): n for state, n in rows})

    def _live_workers(self, conn: Connection) -> int:
        return conn.execute(
            sa.text(
                f"SELECT count(*) FROM {self._t}workers WHERE study_id = :s "
                f"AND stopped_at IS NULL AND {now_sql(conn)} - heartbeat_at <= grace_s"
            ),
            {"s": self.study_id},
        ).scalar_one()

    def claim(self) -> Claim | None:
        """Take the lowest-numbered WAITING trial, or None if there is none."""
        with self.storage.transaction() as conn:
            now = now_sql(conn)
            if self._pg:
                row = conn.execute(
                    sa.text(
                        "WITH picked AS (SELECT trial_id FROM trials WHERE study_id = :s "
                        "AND state = 'WAITING' ORDER BY number LIMIT 1 FOR UPDATE SKIP LOCKED), "
                        "started AS (UPDATE trials t SET state = 'RUNNING', "
                        "datetime_start = coalesce(t.datetime_start, :start) FROM picked "
                        "WHERE t.trial_id = picked.trial_id RETURNING t.trial_id, t.number), "
                        f"leased AS (INSERT INTO {self._t}trial_leases "
                        "(trial_id, study_id, worker_id, generation, claimed_at) "
                        f"SELECT trial_id, :s, :w, 1, {now} FROM started "
                        "ON CONFLICT (trial_id) DO UPDATE SET worker_id = excluded.worker_id, "
                        f"generation = {self._t}trial_leases.generation + 1, "
                        "claimed_at = excluded.claimed_at "
                        "RETURNING trial_id, generation, last_worker_id) "
                        # One round trip: the trial's params, its values so far (a resumed
                        # trial) and how many trials are left queued (this statement still
                        # sees the picked one as waiting).
                        "SELECT leased.trial_id, started.number, leased.generation, "
                        "(SELECT count(*) - 1 FROM trials WHERE study_id = :s "
                        "AND state = 'WAITING') AS waiting, "
                        "(SELECT json_agg(json_build_array(p.param_name, p.param_value, "
                        "p.distribution_json)) FROM trial_params p "
                        "WHERE p.trial_id = leased.trial_id) AS params, "
                        "(SELECT json_agg(json_build_array(v.step, v.intermediate_value, "
                        "v.intermediate_value_type)) FROM trial_intermediate_values v "
                        "WHERE v.trial_id = leased.trial_id) AS steps, "
                        "leased.last_worker_id "
                        "FROM leased JOIN started ON started.trial_id = leased.trial_id"
                    ),
                    {"s": self.study_id, "w": self.worker_id, "start": utcnow_naive()},
                ).first()
                if row is None:
                    return None
                data = TrialData(
                    params=[tuple(p) for p in row.params or []],
                    steps=[tuple(v) for v in row.steps or []],
                    previous_worker=row.last_worker_id,
                )
                return Claim(row[0], row[1], row[2], waiting=max(0, row.waiting), loaded=data)
            else:  # SQLite: BEGIN IMMEDIATE already serializes writers
                picked = conn.execute(
                    sa.text(
                        "SELECT trial_id, number FROM trials WHERE study_id = :s "
                        "AND state = 'WAITING' ORDER BY number LIMIT 1"
                    ),
                    {"s": self.study_id},
                ).first()
                if picked is None:
                    return None
                conn.execute(
                    sa.text(
                        "UPDATE trials SET state = 'RUNNING', "
                        "datetime_start = coalesce(datetime_start, :start) WHERE trial_id = :t"
                    ),
                    {"t": picked.trial_id, "start": utcnow_naive()},
                )
                row = conn.execute(
                    sa.text(
                        "INSERT INTO trial_leases (trial_id, study_id, worker_id, generation, "
                        f"claimed_at) VALUES (:t, :s, :w, 1, {now}) ON CONFLICT (trial_id) DO "
                        "UPDATE SET worker_id = excluded.worker_id, "
                        "generation = trial_leases.generation + 1, "
                        "claimed_at = excluded.claimed_at "
                        "RETURNING trial_id, :n AS number, generation"
                    ),
                    {
                        "t": picked.trial_id,
                        "s": self.study_id,
                        "w": self.worker_id,
                        "n": picked.number,
                    },
                ).first()
        return None if row is None else Claim(row[0], row[1], row[2])

    def held_claims(self) -> list[Claim]:
        """Leases this worker holds (after an ambiguous commit, a claim may have succeeded)."""
        with self.storage.autocommit() as conn:
            rows = conn.execute(
                sa.text(
                    f"SELECT l.trial_id, t.number, l.generation FROM {self._t}trial_leases l "
                    "JOIN trials t ON t.trial_id = l.trial_id "
                    "WHERE l.worker_id = :w AND t.state = 'RUNNING'"
                ),
                {"w": self.worker_id},
            ).all()
        return [Claim(*row) for row in rows]

    @contextlib.contextmanager
    def sampling_lock(self) -> Iterator[bool]:
        """Try to become the study's one sampler; yields whether this process got the lock."""
        if self._pg:
            with self.storage.autocommit() as conn:
                got = conn.execute(
                    sa.text("SELECT pg_try_advisory_lock(:c, :s)"),
                    {"c": _LOCK_CLASS, "s": self.study_id},
                ).scalar_one()
                try:
                    yield bool(got)
                finally:
                    if got:
                        conn.execute(
                            sa.text("SELECT pg_advisory_unlock(:c, :s)"),
                            {"c": _LOCK_CLASS, "s": self.study_id},
                        )
            return
        path = f"{self.storage.sqlite_path()}.sampler-{self.study_id}.lock"
        with open(path, "a+b") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def create_sampled_trials(
        self,
        params_for: Callable[[int], dict[str, tuple[float, str]]],
        how_many: Callable[[Counts, int], int],
    ) -> int:
        """Top the queue up with trials whose params need no history (random search), in one
        transaction on one connection: take the sampling lock for the transaction, count,
        insert `how_many(counts, live workers)` WAITING trials with their params.

        `params_for`: trial number -> {name: (internal value, distribution JSON)}. Returns how
        many trials were created (0 if another process holds the sampling lock).
        """
        with self.storage.transaction() as conn:
            # SQLite's BEGIN IMMEDIATE already excludes every other writer.
            if (
                self._pg
                and not conn.execute(
                    sa.text("SELECT pg_try_advisory_xact_lock(:c, :s)"),
                    {"c": _LOCK_CLASS, "s": self.study_id},
                ).scalar_one()
            ):
                return 0
            counts = self._counts(conn)
            count = how_many(counts, self._live_workers(conn))
            for number in range(counts.total, counts.total + max(0, count)):
                trial_id = conn.execute(
                    sa.text(
                        "INSERT INTO trials (number, study_id, state, datetime_start) VALUES "
                        f"(:n, :s, {_enum(conn, 'WAITING', 'trialstate')}, NULL) "
                        "RETURNING trial_id"
                    ),
                    {"n": number, "s": self.study_id},
                ).scalar_one()
                conn.execute(
                    sa.text(
                        "INSERT INTO trial_params (trial_id, param_name, param_value, "
                        "distribution_json) VALUES (:t, :name, :value, :dist)"
                    ),
                    [
                        {"t": trial_id, "name": name, "value": value, "dist": dist}
                        for name, (value, dist) in params_for(number).items()
                    ],
                )
            return max(0, count)

    def create_trial(self) -> tuple[int, int]:
        """Insert the study's next trial, to be sampled through Optuna by this worker, then
        enqueued. It is RUNNING under this worker's lease meanwhile: no one claims it half
        sampled, and should this worker die now, the reaper hands it back.

        Call only while holding the sampling lock (trial numbers are counted, as Optuna does).
        """
        with self.storage.transaction() as conn:
            row = conn.execute(
                sa.text(
                    "INSERT INTO trials (number, study_id, state, datetime_start) "
                    "VALUES ((SELECT count(*) FROM trials WHERE study_id = :s), :s, "
                    f"{_enum(conn, 'RUNNING', 'trialstate')}, :start) RETURNING trial_id, number"
                ),
                {"s": self.study_id, "start": utcnow_naive()},
            ).one()
            conn.execute(
                sa.text(
                    f"INSERT INTO {self._t}trial_leases (trial_id, study_id, worker_id, "
                    f"generation, claimed_at) VALUES (:t, :s, :w, 0, {now_sql(conn)})"
                ),
                {"t": row.trial_id, "s": self.study_id, "w": self.worker_id},
            )
        return row.trial_id, row.number

    def enqueue_sampled(self, trial_id: int) -> None:
        """Make a freshly sampled trial claimable."""
        with self.storage.transaction() as conn:
            conn.execute(
                sa.text(
                    "UPDATE trials SET state = 'WAITING', datetime_start = NULL "
                    "WHERE trial_id = :t AND state = 'RUNNING'"
                ),
                {"t": trial_id},
            )
            conn.execute(
                sa.text(f"UPDATE {self._t}trial_leases SET worker_id = NULL WHERE trial_id = :t"),
                {"t": trial_id},
            )

    # -- writes for a held trial (all fenced by the lease) ----------------------------------

    def report(self, claim: Claim, values: dict[int, float]) -> None:
        """Write intermediate values (epoch -> score) into Optuna's table; idempotent per epoch.

        On PostgreSQL this is one statement (the lease check and the upsert), in autocommit:
        a report is one round trip.
        """
        if self._pg:
            self._report_pg(claim, values)
            return
        with self.storage.transaction() as conn:
            self._fence(conn, claim, epoch=max(values))
            self._write_values(conn, claim.trial_id, values)

    def _report_pg(self, claim: Claim, values: dict[int, float]) -> None:
        rows, params = (
            [],
            {"t": claim.trial_id, "w": self.worker_id, "g": claim.generation, "e": max(values)},
        )
        for i, (step, value) in enumerate(sorted(values.items())):
            kind = _value_type(value)
            rows.append(f"(CAST(:s{i} AS integer), CAST(:v{i} AS double precision), '{kind}')")
            params[f"s{i}"], params[f"v{i}"] = step, value if kind == "FINITE" else None
        with self.storage.autocommit() as conn:
            written = conn.execute(
                sa.text(
                    f"WITH fence AS (UPDATE {self._t}trial_leases SET epoch = :e "
                    "WHERE trial_id = :t AND worker_id = :w AND generation = :g "
                    "RETURNING trial_id) "
                    "INSERT INTO trial_intermediate_values (trial_id, step, intermediate_value, "
                    "intermediate_value_type) SELECT fence.trial_id, v.step, v.value, "
                    "CAST(v.kind AS trialintermediatevaluetype) "
                    f"FROM fence, (VALUES {', '.join(rows)}) AS v (step, value, kind) "
                    "ON CONFLICT (trial_id, step) DO UPDATE SET intermediate_value = "
                    "excluded.intermediate_value, intermediate_value_type = "
                    "excluded.intermediate_value_type RETURNING 1"
                ),
                params,
            ).all()
        if not written:
            raise LeaseLost(f"trial {claim.number} was taken over by another worker")

    def finish(
        self,
        claim: Claim,
        state: str,
        value: float | None,
        user_attrs: dict[str, Any],
        system_attrs: dict[str, Any] | None = None,
        intermediate: dict[int, float] | None = None,
    ) -> None:
        """Record the trial's end (COMPLETE, PRUNED or FAIL) with its value and attributes, and
        any intermediate values not written yet.

        The lease is left as it is: the trial's state says it is over, and a retry after a
        connection lost around the commit passes the fence again and rewrites the same values.
        """
        assert state in FINISHED_STATES, state
        if value is not None and math.isnan(value):
            raise ValueError("a finished trial's value cannot be NaN")
        if value is not None and state not in ("COMPLETE", "PRUNED"):
            value = None
        if self._pg:
            self._finish_pg(claim, state, value, user_attrs, system_attrs or {}, intermediate or {})
            return
        with self.storage.transaction() as conn:
            self._fence(conn, claim)
            self._write_values(conn, claim.trial_id, intermediate or {})
            self._set_attrs(conn, claim.trial_id, "trial_user_attributes", user_attrs)
            self._set_attrs(conn, claim.trial_id, "trial_system_attributes", system_attrs or {})
            if value is not None:
                kind = _value_type(value)
                conn.execute(
                    sa.text(
                        "INSERT INTO trial_values (trial_id, objective, value, value_type) VALUES "
                        f"(:t, 0, :v, {_enum(conn, kind, 'trialvaluetype')}) ON CONFLICT "
                        "(trial_id, objective) DO UPDATE SET value = excluded.value, "
                        "value_type = excluded.value_type"
                    ),
                    {"t": claim.trial_id, "v": value if kind == "FINITE" else None},
                )
            conn.execute(
                sa.text(
                    f"UPDATE trials SET state = {_enum(conn, state, 'trialstate')}, "
                    "datetime_complete = :done WHERE trial_id = :t"
                ),
                {"t": claim.trial_id, "done": utcnow_naive()},
            )

    def _finish_pg(
        self,
        claim: Claim,
        state: str,
        value: float | None,
        user_attrs: dict[str, Any],
        system_attrs: dict[str, Any],
        intermediate: dict[int, float],
    ) -> None:
        """`finish` as one statement: the writes hang off the fence, so they all happen or none
        (PostgreSQL runs every data-modifying WITH clause exactly once, in one snapshot)."""
        params: dict[str, Any] = {
            "t": claim.trial_id,
            "w": self.worker_id,
            "g": claim.generation,
            "done": utcnow_naive(),
        }
        clauses = [
            f"fence AS (UPDATE {self._t}trial_leases SET generation = generation "
            "WHERE trial_id = :t AND worker_id = :w AND generation = :g RETURNING trial_id)"
        ]
        for n, (table, attrs) in enumerate(
            (("trial_user_attributes", user_attrs), ("trial_system_attributes", system_attrs))
        ):
            if attrs:
                rows = []
                for i, (key, v) in enumerate(attrs.items()):
                    params[f"k{n}_{i}"], params[f"v{n}_{i}"] = key, json.dumps(v)
                    rows.append(f"(CAST(:k{n}_{i} AS text), CAST(:v{n}_{i} AS text))")
                clauses.append(
                    f"a{n} AS (INSERT INTO {table} (trial_id, key, value_json) "
                    f"SELECT fence.trial_id, x.k, x.v FROM fence, (VALUES {', '.join(rows)}) "
                    "AS x (k, v) ON CONFLICT (trial_id, key) DO UPDATE SET "
                    "value_json = excluded.value_json)"
                )
        if intermediate:
            rows = []
            for i, (step, v) in enumerate(sorted(intermediate.items())):
                kind = _value_type(v)
                params[f"s{i}"], params[f"iv{i}"] = step, v if kind == "FINITE" else None
                rows.append(f"(CAST(:s{i} AS integer), CAST(:iv{i} AS double precision), '{kind}')")
            clauses.append(
                "iv AS (INSERT INTO trial_intermediate_values (trial_id, step, "
                "intermediate_value, intermediate_value_type) SELECT fence.trial_id, x.s, x.v, "
                f"CAST(x.k AS trialintermediatevaluetype) FROM fence, (VALUES {', '.join(rows)}) "
                "AS x (s, v, k) ON CONFLICT (trial_id, step) DO UPDATE SET intermediate_value "
                "= excluded.intermediate_value, intermediate_value_type = "
                "excluded.intermediate_value_type)"
            )
        if value is not None:
            kind = _value_type(value)
            params["v"] = value if kind == "FINITE" else None
            clauses.append(
                "val AS (INSERT INTO trial_values (trial_id, objective, value, value_type) "
                f"SELECT fence.trial_id, 0, CAST(:v AS double precision), "
                f"CAST('{kind}' AS trialvaluetype) FROM fence ON CONFLICT (trial_id, objective) "
                "DO UPDATE SET value = excluded.value, value_type = excluded.value_type)"
            )
        clauses.append(
            f"st AS (UPDATE trials SET state = CAST('{state}' AS trialstate), "
            "datetime_complete = :done FROM fence WHERE trials.trial_id = fence.trial_id)"
        )
        with self.storage.autocommit() as conn:
            fenced = conn.execute(
                sa.text(f"WITH {', '.join(clauses)} SELECT count(*) FROM fence"), params
            ).scalar_one()
        if fenced != 1:
            raise LeaseLost(f"trial {claim.number} was taken over by another worker")

    def hand_back(
        self,
        claim: Claim,
        system_attrs: dict[str, Any] | None = None,
        intermediate: dict[int, float] | None = None,
    ) -> None:
        """Return a trial to the queue (preempted or interrupted): another worker resumes it.

        The lease keeps naming this worker until the next claim (a retry after a lost commit
        passes the fence); `last_worker_id` tells the next worker whose work it continues.
        """
        with self.storage.transaction() as conn:
            self._fence(conn, claim)
            self._write_values(conn, claim.trial_id, intermediate or {})
            self._set_attrs(conn, claim.trial_id, "trial_system_attributes", system_attrs or {})
            self._release(conn, claim.trial_id, keep_holder=True)

    def set_system_attrs(self, claim: Claim, attrs: dict[str, Any]) -> None:
        with self.storage.transaction() as conn:
            self._fence(conn, claim)
            self._set_attrs(conn, claim.trial_id, "trial_system_attributes", attrs)

    def move_checkpoint_pointer(
        self, claim: Claim, key: str, pointer: dict[str, Any], meta_key: str, meta: str
    ) -> str | None:
        """Point the trial at a new checkpoint artifact; returns the previous artifact's id."""
        with self.storage.transaction() as conn:
            self._fence(conn, claim)
            previous = self._attr(conn, claim.trial_id, key)
            self._set_attrs(
                conn, claim.trial_id, "trial_system_attributes", {key: pointer, meta_key: meta}
            )
            if previous is not None:
                self._delete_attr(conn, claim.trial_id, f"artifacts:{previous['artifact_id']}")
        return None if previous is None else previous["artifact_id"]

    def drop_checkpoint_pointer(self, trial_id: int, key: str) -> None:
        with self.storage.transaction() as conn:
            previous = self._attr(conn, trial_id, key)
            if previous is not None:
                self._delete_attr(conn, trial_id, key)
                self._delete_attr(conn, trial_id, f"artifacts:{previous['artifact_id']}")

    def trial_data(self, trial_id: int) -> TrialData:
        """A trial's params, intermediate values and previous worker (what `claim` returns
        with the claim on PostgreSQL)."""
        with self.storage.autocommit() as conn:
            params = conn.execute(
                sa.text(
                    "SELECT param_name, param_value, distribution_json FROM trial_params "
                    "WHERE trial_id = :t"
                ),
                {"t": trial_id},
            ).all()
            steps = conn.execute(
                sa.text(
                    "SELECT step, intermediate_value, intermediate_value_type "
                    "FROM trial_intermediate_values WHERE trial_id = :t"
                ),
                {"t": trial_id},
            ).all()
            previous = conn.execute(
                sa.text(f"SELECT last_worker_id FROM {self._t}trial_leases WHERE trial_id = :t"),
                {"t": trial_id},
            ).scalar()
        return TrialData(
            params=[tuple(r) for r in params],
            steps=[tuple(r) for r in steps],
            previous_worker=previous,
        )

    def trial_system_attr(self, trial_id: int, key: str) -> Any:
        with self.storage.autocommit() as conn:
            return self._attr(conn, trial_id, key)

    # -- internals --------------------------------------------------------------------------

    def _holds(self, conn: Connection, claim: Claim) -> bool:
        row = conn.execute(
            sa.text(f"SELECT worker_id, generation FROM {self._t}trial_leases WHERE trial_id = :t"),
            {"t": claim.trial_id},
        ).first()
        return row is not None and row[0] == self.worker_id and row[1] == claim.generation

    def _fence(self, conn: Connection, claim: Claim, epoch: int | None = None) -> None:
        """Lock our lease row for this transaction, or raise LeaseLost."""
        sets = "epoch = :e" if epoch is not None else "generation = generation"
        updated = conn.execute(
            sa.text(
                f"UPDATE {self._t}trial_leases SET {sets} WHERE trial_id = :t "
                "AND worker_id = :w AND generation = :g"
            ),
            {"t": claim.trial_id, "w": self.worker_id, "g": claim.generation, "e": epoch},
        ).rowcount
        if updated != 1:
            raise LeaseLost(f"trial {claim.number} was taken over by another worker")

    def _write_values(self, conn: Connection, trial_id: int, values: dict[int, float]) -> None:
        for step, value in sorted(values.items()):
            kind = _enum(conn, _value_type(value), "trialintermediatevaluetype")
            conn.execute(
                sa.text(
                    "INSERT INTO trial_intermediate_values (trial_id, step, "
                    "intermediate_value, intermediate_value_type) "
                    f"VALUES (:t, :step, :v, {kind}) "
                    "ON CONFLICT (trial_id, step) DO UPDATE SET intermediate_value = "
                    "excluded.intermediate_value, intermediate_value_type = "
                    "excluded.intermediate_value_type"
                ),
                {"t": trial_id, "step": step, "v": value if math.isfinite(value) else None},
            )

    def _attr(self, conn: Connection, trial_id: int, key: str) -> Any:
        row = conn.execute(
            sa.text(
                "SELECT value_json FROM trial_system_attributes WHERE trial_id = :t AND key = :k"
            ),
            {"t": trial_id, "k": key},
        ).first()
        return None if row is None else json.loads(row[0])

    def _delete_attr(self, conn: Connection, trial_id: int, key: str) -> None:
        conn.execute(
            sa.text("DELETE FROM trial_system_attributes WHERE trial_id = :t AND key = :k"),
            {"t": trial_id, "k": key},
        )

    def _release(self, conn: Connection, trial_id: int, *, keep_holder: bool = False) -> None:
        """Queue a held trial again; unless keep_holder, its holder can no longer write to it."""
        conn.execute(
            sa.text(
                "UPDATE trials SET state = 'WAITING' WHERE trial_id = :t AND state = 'RUNNING'"
            ),
            {"t": trial_id},
        )
        conn.execute(
            sa.text(
                f"UPDATE {self._t}trial_leases SET last_worker_id = worker_id"
                f"{'' if keep_holder else ', worker_id = NULL'} WHERE trial_id = :t"
            ),
            {"t": trial_id},
        )

    def _set_attrs(
        self, conn: Connection, trial_id: int, table: str, attrs: dict[str, Any]
    ) -> None:
        for key, value in attrs.items():
            conn.execute(
                sa.text(
                    f"INSERT INTO {table} (trial_id, key, value_json) VALUES (:t, :k, :v) "
                    "ON CONFLICT (trial_id, key) DO UPDATE SET value_json = excluded.value_json"
                ),
                {"t": trial_id, "k": key, "v": json.dumps(value)},
            )


def _value_type(value: float) -> str:
    if math.isnan(value):
        return "NAN"
    if math.isinf(value):
        return "INF_POS" if value > 0 else "INF_NEG"
    return "FINITE"


def _enum(conn: Connection, name: str, pg_type: str) -> str:
    """An Optuna enum literal (a fixed name, never user input), cast for PostgreSQL."""
    assert name.isidentifier() and name.isupper(), name
    return f"CAST('{name}' AS {pg_type})" if conn.dialect.name == "postgresql" else f"'{name}'"
