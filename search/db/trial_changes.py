"""The one incremental reader of a study's trials, and the one cache of them in a process.

A finished trial never changes, so a process's `TrialCache` of a study (read by the samplers'
mirror, `search.sampling.mirror`, and the pruners' view, `search.pruning.storage`, both)
reads, each time, only the trials created since its last look and the ones unfinished then
(`ChangeCursor`), both on the primary key, then whatever of those trials it needs: params,
system attributes, values, intermediate values. Every read takes a connection the caller
opened (one transaction for a whole look) and the ids to read.

Example::

    cache = TrialCache.of(storage, study_id)   # one per study in a process
    cache.refresh()
    trials = cache.trials()

    cursor = ChangeCursor(study_id)            # the reads alone
    with storage.read() as conn:
        rows = read_changed_trials(conn, cursor)
    for r in rows:
        cursor.saw(r.trial_id, r.state)
"""

from __future__ import annotations

import copy
import functools
import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from optuna.distributions import BaseDistribution, json_to_distribution
from optuna.trial import FrozenTrial, TrialState
from sqlalchemy.engine import Connection, Row

from search.db.statements import bound_ids, in_bound_ids
from search.db.storage import Storage
from search.db.tables import (
    stored_float,
    trial_intermediate_values,
    trial_leases,
    trial_params,
    trial_system_attributes,
    trial_values,
    trials,
)

__all__ = [
    "RUNG_PREFIX",
    "STATES",
    "ChangeCursor",
    "TrialCache",
    "light_trial",
    "param_value",
    "read_changed_trials",
    "read_curves",
    "read_params",
    "read_system_attrs",
    "read_values",
]

STATES = {s.name: s for s in TrialState}
"""Optuna's trial states by the name the trials table holds."""
_FINISHED = frozenset(name for name, s in STATES.items() if s.is_finished())
RUNG_PREFIX = "completed_rung_"
"""Optuna's successive halving records a trial's value at rung k as `completed_rung_k`."""


@dataclass
class ChangeCursor:
    """Where a view's last look ended: the highest trial id it saw and the trials unfinished
    then. Copy it (`snapshot`) to read without holding the view's lock."""

    study_id: int
    max_id: int = -1
    unfinished: set[int] = field(default_factory=set)

    def saw(self, trial_id: int, state: str | TrialState) -> None:
        """A trial read in `state`: read again next time unless it is finished."""
        finished = (STATES[state] if isinstance(state, str) else state).is_finished()
        if finished:
            self.unfinished.discard(trial_id)
        else:
            self.unfinished.add(trial_id)
        self.max_id = max(self.max_id, trial_id)

    def snapshot(self) -> ChangeCursor:
        return ChangeCursor(self.study_id, self.max_id, set(self.unfinished))


def read_changed_trials(
    conn: Connection, cursor: ChangeCursor, *, with_rungs: bool = False
) -> Sequence[Row[Any]]:
    """The trials created since the cursor's last look, or unfinished then: trial_id, number,
    state, datetime_start, datetime_complete; `with_rungs`: one row per `completed_rung_*`
    attribute too (key, value_json; None for a trial without one) and the trial's lease
    (generation, epoch; None for a trial never claimed), in the same round trip."""
    dialect = conn.dialect.name
    statement = _changed_with_rungs(dialect) if with_rungs else _changed(dialect)
    ids = bound_ids(dialect, sorted(cursor.unfinished))
    return conn.execute(
        statement, {"study": cursor.study_id, "max_seen": cursor.max_id, "ids": ids}
    ).all()


def read_params(conn: Connection, trial_ids: Sequence[int]) -> Sequence[Row[Any]]:
    """(trial_id, param_name, param_value, distribution_json) of the trials."""
    dialect = conn.dialect.name
    return conn.execute(_params(dialect), {"ids": bound_ids(dialect, trial_ids)}).all()


def read_system_attrs(conn: Connection, trial_ids: Sequence[int]) -> Sequence[Row[Any]]:
    """(trial_id, key, value_json) of the trials' system attributes."""
    dialect = conn.dialect.name
    return conn.execute(_attrs(dialect), {"ids": bound_ids(dialect, trial_ids)}).all()


def read_values(conn: Connection, trial_ids: Sequence[int]) -> Sequence[Row[Any]]:
    """(trial_id, value, value_type) of the trials' first objective."""
    dialect = conn.dialect.name
    return conn.execute(_values(dialect), {"ids": bound_ids(dialect, trial_ids)}).all()


def read_curves(conn: Connection, trial_ids: Sequence[int]) -> Sequence[Row[Any]]:
    """(trial_id, step, intermediate_value, intermediate_value_type) of the trials' reports."""
    dialect = conn.dialect.name
    return conn.execute(_curves(dialect), {"ids": bound_ids(dialect, trial_ids)}).all()


def _changed_condition(dialect: str) -> sa.ColumnElement[bool]:
    t = trials
    # Both branches on the primary key (the ids are this study's): reads only what changed,
    # not every trial of the study.
    return sa.or_(
        sa.and_(t.c.trial_id > sa.bindparam("max_seen"), t.c.study_id == sa.bindparam("study")),
        in_bound_ids(dialect, t.c.trial_id),
    )


@functools.cache
def _changed(dialect: str) -> sa.Select:
    t = trials
    return sa.select(
        t.c.trial_id, t.c.number, t.c.state, t.c.datetime_start, t.c.datetime_complete
    ).where(_changed_condition(dialect))


@functools.cache
def _changed_with_rungs(dialect: str) -> sa.Select:
    t, a, lease = trials, trial_system_attributes, trial_leases
    rung = sa.and_(a.c.trial_id == t.c.trial_id, a.c.key.startswith(RUNG_PREFIX, autoescape=True))
    return (
        sa.select(
            t.c.trial_id,
            t.c.number,
            t.c.state,
            t.c.datetime_start,
            t.c.datetime_complete,
            a.c.key,
            a.c.value_json,
            lease.c.generation,
            lease.c.epoch,
        )
        .select_from(t.outerjoin(a, rung).outerjoin(lease, lease.c.trial_id == t.c.trial_id))
        .where(_changed_condition(dialect))
    )


@functools.cache
def _params(dialect: str) -> sa.Select:
    p = trial_params
    return sa.select(p.c.trial_id, p.c.param_name, p.c.param_value, p.c.distribution_json).where(
        in_bound_ids(dialect, p.c.trial_id)
    )


@functools.cache
def _attrs(dialect: str) -> sa.Select:
    a = trial_system_attributes
    return sa.select(a.c.trial_id, a.c.key, a.c.value_json).where(
        in_bound_ids(dialect, a.c.trial_id)
    )


@functools.cache
def _values(dialect: str) -> sa.Select:
    v = trial_values
    return sa.select(v.c.trial_id, v.c.value, v.c.value_type).where(
        in_bound_ids(dialect, v.c.trial_id), v.c.objective == 0
    )


@functools.cache
def _curves(dialect: str) -> sa.Select:
    v = trial_intermediate_values
    return sa.select(
        v.c.trial_id, v.c.step, v.c.intermediate_value, v.c.intermediate_value_type
    ).where(in_bound_ids(dialect, v.c.trial_id))


class TrialCache:
    """A study's trials in this process, refreshed incrementally: the one copy the samplers'
    mirror (`search.sampling.mirror`) and the pruners' view (`search.pruning.storage`)
    both read, so that a worker reads each change of the study once.

    A refresh reads the trials created since the last look and the ones unfinished then, with
    their `completed_rung_*` attributes (one round trip); a trial that is new, finished since,
    or had no params yet is read whole (params, system attributes, value; curves as `need`ed).
    A queued or running trial with its params changes only in its rung values (and, with
    `live_curves`, its reports): only those are applied. Its reports are read again only while
    it runs, or once its state or its lease (claim generation, last epoch reported) changed
    since they were read: a paused trial gets reports only under a new claim, so the paused
    trials that wait (most unfinished trials of an ASHA study) cost a row each, not a curve;
    one that does not run and reads as it did at the last look (state, lease, rung values)
    is skipped without a comparison.
    Trials are `FrozenTrial`s with user attributes left empty, replaced (never changed in
    place) when they change, so a list a reader holds stays as it was. Safe to use from
    several threads; one refresh at a time.

    One per (storage, study) in a process: `TrialCache.of(storage, study_id)`.
    """

    def __init__(self, storage: Storage, study_id: int) -> None:
        self._storage = storage
        self.study_id = study_id
        self._trials: dict[int, FrozenTrial] = {}
        self._cursor = ChangeCursor(study_id)
        self.lock = threading.RLock()
        """Held while the trials change; a reader may hold it to see none change meanwhile."""
        self._refreshing = threading.Lock()
        self._local: dict[int, dict[str, Any]] = {}  # attributes set here: kept over reads
        # Of the unfinished trials whose reports were read: the lease (generation, epoch) read
        # with them, at or before the reports. A lease that differs now: read them again.
        self._leases: dict[int, tuple[Any, Any]] = {}
        # Of the unfinished trials known with their params: what the last read of each said
        # (`_Seen`). A trial that reads the same again, and does not run, has not changed: a
        # refresh skips it without a look at its rows (most unfinished trials of an ASHA
        # study wait paused, unchanged, refresh after refresh).
        self._seen: dict[int, _Seen] = {}
        self._generation = 0  # goes up when `need` starts over
        self._listeners: list[Callable[[int, int, str, Any], None]] = []
        self.finished_curves = False
        """The reports of every finished trial are read (the median pruner, TPE across
        fidelities); else only pruned trials' (TPE ranks them by their last report)."""
        self.live_curves = False
        """The reports of unfinished trials too, kept up to date (TPE across fidelities)."""
        self.version = 0
        """Goes up whenever a trial is added or replaced."""
        self._log: list[int] = []  # ids of the trials added or replaced since `_log_epoch` began
        self._log_epoch = 0  # goes up when `_log` starts over (readers of `changes` read all)

    @staticmethod
    def of(storage: Storage, study_id: int) -> TrialCache:
        """This process's cache of `study_id` on `storage` (made at the first call)."""
        caches = storage.__dict__.setdefault("_trial_caches", {})
        with _CACHES_LOCK:
            cache = caches.get(study_id)
            if cache is None:
                cache = caches[study_id] = TrialCache(storage, study_id)
            return cache

    def need(self, *, finished_curves: bool = False, live_curves: bool = False) -> None:
        """Ask for more of each trial; trials already read are read again at the next refresh."""
        with self.lock:
            more = (finished_curves and not self.finished_curves) or (
                live_curves and not self.live_curves
            )
            self.finished_curves |= finished_curves
            self.live_curves |= live_curves
            if more and self._trials:
                self._trials.clear()
                self._leases.clear()
                self._seen.clear()
                self._cursor = ChangeCursor(self.study_id)
                self._generation += 1
                self.version += 1
                self._restart_log()

    def listen(self, on_rung_value: Callable[[int, int, str, Any], None]) -> None:
        """Call `on_rung_value(trial id, number, key, value)` for every rung value read, from
        now on and for those already known."""
        with self.lock:
            self._listeners.append(on_rung_value)
            for trial in self._trials.values():
                for key, value in trial.system_attrs.items():
                    if key.startswith(RUNG_PREFIX):
                        on_rung_value(trial._trial_id, trial.number, key, value)

    def trials(self) -> list[FrozenTrial]:
        """Every trial known, in no particular order."""
        with self.lock:
            return list(self._trials.values())

    def changes(
        self, since: tuple[int, int] | None
    ) -> tuple[tuple[int, int], list[FrozenTrial], bool]:
        """What changed since the call that returned the token `since`: (a token for the next
        call, trials, whole). `whole`: the trials are every trial known (first call, or the
        cache started over); else they are the trials added or replaced since, as they are
        now, in the order they last changed. Reading what changed costs what changed, not the
        study's size."""
        with self.lock:
            token = (self._log_epoch, len(self._log))
            if since is None or since[0] != self._log_epoch or since[1] > len(self._log):
                return token, list(self._trials.values()), True
            ids = dict.fromkeys(self._log[since[1] :])
            trials = self._trials
            return token, [trials[i] for i in ids if i in trials], False

    def _logged(self, trial_id: int) -> None:
        """Note a trial added or replaced (the lock held)."""
        self._log.append(trial_id)
        if len(self._log) > 4 * len(self._trials) + 4096:
            self._restart_log()  # bounded: a reader far behind reads all once

    def _restart_log(self) -> None:
        self._log = []
        self._log_epoch += 1

    def get(self, trial_id: int) -> FrozenTrial | None:
        with self.lock:
            return self._trials.get(trial_id)

    def add_running(self, trial_id: int, number: int) -> None:
        """A trial this process just claimed: known without reading it (a new trial has no
        params here yet: the next refresh reads it whole)."""
        with self.lock:
            if trial_id not in self._trials:
                self._trials[trial_id] = light_trial(trial_id, number, TrialState.RUNNING)
                self._cursor.unfinished.add(trial_id)
                self.version += 1
                self._logged(trial_id)

    def set_system_attr(self, trial_id: int, key: str, value: Any) -> None:
        """An attribute this process set (a pruner's rung value): shown at once, and kept over
        what reads of the trial return until they hold it too."""
        with self.lock:
            self._local.setdefault(trial_id, {})[key] = value
            trial = self._trials.get(trial_id)
            if trial is None:
                return
            trial = copy.copy(trial)
            trial.system_attrs = {**trial.system_attrs, key: value}
            self._trials[trial_id] = trial
            self.version += 1
            self._logged(trial_id)
            if key.startswith(RUNG_PREFIX):
                for listener in self._listeners:
                    listener(trial_id, trial.number, key, value)

    def refresh(self) -> int:
        """Read what changed since the last look; returns how many trials changed. The lock is
        not held while the database answers."""
        # Never waits for another thread's refresh (a reader holding `lock`, a decision, may
        # refresh while that one waits for the lock): two at once each apply what they read;
        # a finished trial never goes back, rung values are only added.
        with self.lock:
            cursor = self._cursor.snapshot()
            # The trials a refresh reads are the new ones (never known, but those claimed here,
            # which are unfinished) and the unfinished ones: what is known of those (copies
            # of the dicts as they are now; `_Known` is made for the trials that changed).
            known = _Snapshot(dict(self._trials), dict(self._leases), dict(self._seen))
            finished_curves, live_curves = self.finished_curves, self.live_curves
            generation = self._generation
        with self._storage.read() as conn:
            read = _read_changes(conn, cursor, known, finished_curves, live_curves)
        with self.lock:
            if generation != self._generation:
                return 0  # `need` started over meanwhile: the next refresh reads all
            return self._apply(read)

    def _apply(self, read: _Changes) -> int:
        changed = 0
        for r in read.rows:
            state = STATES[r.state]
            known = self._trials.get(r.trial_id)
            if known is not None and known.state.is_finished():
                continue  # read again by a slower refresh: finished trials never change
            if state.is_finished():
                self._leases.pop(r.trial_id, None)
            elif r.trial_id in read.leases:  # its reports were read with this lease
                self._leases[r.trial_id] = read.leases[r.trial_id]
            local = self._local.get(r.trial_id, {})
            if r.trial_id in read.whole:
                params, dists = read.params.get(r.trial_id, ({}, {}))
                trial = FrozenTrial(
                    number=r.number,
                    state=state,
                    value=read.values.get(r.trial_id),
                    values=None,
                    datetime_start=r.datetime_start,
                    datetime_complete=r.datetime_complete,
                    params=params,
                    distributions=dists,
                    user_attrs={},
                    system_attrs={**read.attrs.get(r.trial_id, {}), **local},
                    intermediate_values=read.curves.get(r.trial_id, {}),
                    trial_id=r.trial_id,
                )
            elif known is None:
                continue  # `need` started over meanwhile
            else:
                rungs = {**read.rungs.get(r.trial_id, {}), **local}
                curve = read.curves.get(r.trial_id, known.intermediate_values)
                attrs = known.system_attrs
                if (
                    known.state == state
                    and all(attrs.get(k) == v for k, v in rungs.items())
                    and curve == known.intermediate_values
                ):
                    self._cursor.saw(r.trial_id, state)
                    self._remember(r.trial_id, known, read)
                    continue  # most unfinished trials have not changed since the last look
                trial = copy.copy(known)
                trial.state = state
                trial.system_attrs = {**attrs, **rungs}
                trial.intermediate_values = curve
            self._trials[r.trial_id] = trial
            self._cursor.saw(r.trial_id, state)
            self._remember(r.trial_id, trial, read)
            self._logged(r.trial_id)
            changed += 1
            for listener in self._listeners:
                for key, value in trial.system_attrs.items():
                    if key.startswith(RUNG_PREFIX):
                        listener(r.trial_id, r.number, key, value)
        if changed:
            self.version += 1
        return changed

    def _remember(self, trial_id: int, trial: FrozenTrial, read: _Changes) -> None:
        """What this read said of an unfinished trial now known with its params: the next
        refresh skips the trial if it reads the same."""
        seen = read.seen.get(trial_id)
        if seen is not None and trial.params and not trial.state.is_finished():
            self._seen[trial_id] = seen
        else:
            self._seen.pop(trial_id, None)


_CACHES_LOCK = threading.Lock()


@dataclass(frozen=True)
class _Known:
    """What a refresh knows of an unfinished trial before it reads."""

    state: TrialState
    has_params: bool
    lease: tuple[Any, Any] | None  # (generation, epoch) when its reports were read; None: never


_Seen = tuple[Any, ...]
"""A trial as one read saw it: state, lease (generation, epoch), rung values (key, JSON)."""


@dataclass(frozen=True)
class _Snapshot:
    """What a refresh knows before it reads: copies of the cache's dicts, taken together."""

    trials: dict[int, FrozenTrial]
    leases: dict[int, tuple[Any, Any]]
    seen: dict[int, _Seen]

    def known(self, trial_id: int) -> _Known | None:
        t = self.trials.get(trial_id)
        return None if t is None else _Known(t.state, bool(t.params), self.leases.get(trial_id))


@dataclass
class _Changes:
    """What one refresh read."""

    rows: list[Row[Any]]
    rungs: dict[int, dict[str, Any]]
    whole: set[int]
    params: dict[int, tuple[dict[str, Any], dict[str, BaseDistribution]]]
    attrs: dict[int, dict[str, Any]]
    values: dict[int, float]
    curves: dict[int, dict[int, float]]
    leases: dict[int, tuple[Any, Any]] = field(default_factory=dict)
    """The lease read with each unfinished trial whose reports were read."""
    seen: dict[int, _Seen] = field(default_factory=dict)
    """How this read saw each trial of `rows`."""


_DISTRIBUTIONS: dict[str, BaseDistribution] = {}
"""Parsed distributions by their JSON: a study has a handful, parsed once per process."""


def _distribution(dist_json: str) -> BaseDistribution:
    dist = _DISTRIBUTIONS.get(dist_json)
    if dist is None:
        dist = _DISTRIBUTIONS[dist_json] = json_to_distribution(dist_json)
    return dist


def param_value(value: float, dist_json: str) -> Any:
    """A stored param (Optuna's internal float and its distribution's JSON) as the user sees it:
    the one decoding of params every reader shares."""
    return _distribution(dist_json).to_external_repr(value)


def _read_changes(
    conn: Connection,
    cursor: ChangeCursor,
    snapshot: _Snapshot,
    finished_curves: bool,
    live_curves: bool,
) -> _Changes:
    joined = read_changed_trials(conn, cursor, with_rungs=True)
    by_trial: dict[int, list[Row[Any]]] = {}
    for r in joined:
        by_trial.setdefault(r.trial_id, []).append(r)
    rows: list[Row[Any]] = []
    seen: dict[int, _Seen] = {}
    previous = snapshot.seen
    for trial_id, group in by_trial.items():
        r = group[-1]
        if r.state in _FINISHED:
            rows.append(r)  # read once: a finished trial never changes
            continue
        pairs = [(g.key, g.value_json) for g in group if g.key is not None]
        if len(pairs) > 1:
            pairs.sort()
        now = (r.state, r.generation, r.epoch, *pairs)
        if r.state != "RUNNING" and previous.get(trial_id) == now:
            continue  # read the same as last time, and not running: nothing changed
        seen[trial_id] = now
        rows.append(r)
    known = {r.trial_id: k for r in rows if (k := snapshot.known(r.trial_id)) is not None}
    rungs: dict[int, dict[str, Any]] = {}
    for r in rows:
        for g in by_trial[r.trial_id]:
            if g.key is not None:
                rungs.setdefault(r.trial_id, {})[g.key] = json.loads(g.value_json)
    whole: set[int] = set()
    for r in rows:
        k = known.get(r.trial_id)
        # New, finished since, or without its params when last read (queued without them, or
        # claimed here and known without a read): read whole. Else only its rungs change.
        if k is None or not k.has_params or STATES[r.state].is_finished():
            whole.add(r.trial_id)
    out = _Changes(rows, rungs, whole, {}, {}, {}, {}, seen=seen)
    ids = sorted(whole)
    if ids:
        for trial_id, name, value, dist_json in read_params(conn, ids):
            values, dists = out.params.setdefault(trial_id, ({}, {}))
            values[name] = param_value(value, dist_json)
            dists[name] = _distribution(dist_json)
        for trial_id, key, value_json in read_system_attrs(conn, ids):
            out.attrs.setdefault(trial_id, {})[key] = json.loads(value_json)
    finished = [r for r in rows if r.trial_id in whole and STATES[r.state].is_finished()]
    if finished:
        for trial_id, value, kind in read_values(conn, [r.trial_id for r in finished]):
            out.values[trial_id] = stored_float(value, kind)
    curved = [
        r.trial_id
        for r in rows
        if (
            r.trial_id in whole
            and (r.state == "PRUNED" or (finished_curves and STATES[r.state].is_finished()))
        )
        or (live_curves and _live_curve_changed(r, known.get(r.trial_id), r.trial_id in whole))
    ]
    if live_curves:
        read_curve = set(curved)
        out.leases = {
            r.trial_id: (r.generation, r.epoch)
            for r in rows
            if r.trial_id in read_curve and not STATES[r.state].is_finished()
        }
    if curved:
        for trial_id, step, value, kind in read_curves(conn, sorted(curved)):
            out.curves.setdefault(trial_id, {})[step] = stored_float(value, kind)
        for trial_id in curved:
            out.curves.setdefault(trial_id, {})
    return out


def _live_curve_changed(row: Row[Any], known: _Known | None, whole: bool) -> bool:
    """Whether an unfinished trial's reports may have changed since they were read: it is read
    whole, it runs (reports come every epoch), its state changed, or its lease did (a claim
    since, or the holder reported). Reports are written only under a lease (fenced writes), so
    a trial that waits under the same lease has the reports it had."""
    state = STATES[row.state]
    if state.is_finished():
        return False
    if whole or known is None or state == TrialState.RUNNING or state != known.state:
        return True
    return known.lease != (row.generation, row.epoch)


def light_trial(
    trial_id: int,
    number: int,
    state: TrialState,
    system_attrs: dict[str, Any] | None = None,
    intermediate_values: dict[int, float] | None = None,
) -> FrozenTrial:
    """A trial with only what the pruners and the samplers' bookkeeping read; params, values
    and user attributes left empty."""
    return FrozenTrial(
        number=number,
        state=state,
        value=None,
        values=None,
        datetime_start=None,
        datetime_complete=None,
        params={},
        distributions={},
        user_attrs={},
        system_attrs=system_attrs or {},
        intermediate_values=intermediate_values or {},
        trial_id=trial_id,
    )
