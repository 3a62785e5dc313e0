"""A bounded view of a long study for TPE across fidelities: its cost per trial stops growing.

Optuna's TPE reads every trial of the study before every sample and, for every parameter,
weighs 24 candidates against a Parzen estimator with one component per trial: its cost grows
linearly with the study (0.3 s per trial at 1,000 trials, 12-29 s at 20,000 on a loaded
machine, bench/BENCHMARKS.md). With ASHA a study is many short trials, so a week on 64 GPUs is
10,000 trials and more.

`BoundedFidelitySampler` shows TPE, past `start` trials, only the trials that decide its next
point, as `search.sampling.multifidelity.fidelity_view` would show them:

- the `best` trials at the epoch the model is fitted on (the highest epoch at least
  `min_points` trials reached: "rung" mode), ranked as TPE ranks them. TPE's "good" set (the
  best 10%, at most 25 trials) is drawn from these, so it is the one of the whole study;
- the `recent` last trials by number: TPE's "bad" set, which TPE already weighs by age
  (Optuna's default weights fall linearly to nearly 0 for the oldest trials);
- every running or queued trial without a report (constant liar: parallel workers spread out).

The view is kept incrementally per study and process (`_Index`): each call reads which
trials changed since the last one and keeps, per epoch, the trials that reported it sorted by
their value there, so the best at an epoch are read without a scan. On a worker's mirror
(`search.sampling.mirror.StudyMirror.trial_changes`) the changed trials are handed over, so a
sample costs what changed, not the study's size; on another storage (Optuna's in-memory one,
in simulations) every trial is looked at (an identity check: a trial's object is replaced when
it changes).

Which trials each kept one is shown as (complete at the level, pruned, running) is decided by
`fidelity_view` itself, on the kept trials: the kept set holds at least `min_points` trials
that reached the level and fewer at every higher epoch than the whole study, so
`fidelity_view` finds the same level and shows every kept trial as it would in the whole study.

The bound's settings were measured for sample quality on LCBench's development instances
(bench/efficiency/design.py, strategy ``bounded``; bench/BENCHMARKS.md).

Example::

    >>> import optuna
    >>> from search.sampling.multifidelity import FidelitySampler
    >>> tpe = optuna.samplers.TPESampler(seed=0)
    >>> bounded = bound(FidelitySampler(tpe, mode="rung", min_points=5))
    >>> type(bounded).__name__, bounded.best, bounded.recent
    ('BoundedFidelitySampler', 50, 200)
"""

from __future__ import annotations

import bisect
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from search.sampling.multifidelity import (
    FidelitySampler,
    _reports,
    _StudyView,
    fidelity_view,
)

__all__ = ["BEST", "RECENT", "START", "BoundedFidelitySampler", "bound", "bounded_trials"]

BEST = 50
"""Trials kept at the model's epoch, the best there (TPE's good set is at most 25 of them)."""

RECENT = 200
"""The last trials by number kept besides the best (TPE's bad set, newest first in weight)."""

START = 1000
"""Up to this many trials with params the view is the whole study (no change from
`FidelitySampler`); past it, the bound applies. A 5,000-epoch study of LCBench's development
suite has 150-700 trials: the default measured there (bench/BENCHMARKS.md) is the default a
study of that size runs; the bound only acts on the long studies whose cost it caps."""

_LIVE = (TrialState.RUNNING, TrialState.WAITING)

_Feed = Callable[[Any], tuple[Any, "Sequence[FrozenTrial] | None"]]
"""A storage's `trial_changes`: (token) -> (next token, the trials changed since, or None)."""


class _Index:
    """One study's trials as the bound needs them, updated from the trials that changed."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: dict[int, FrozenTrial] = {}  # number -> the trial's object last looked at
        self.reports: dict[int, dict[int, float]] = {}  # number -> its reports (usable trials)
        self.counts: Counter[int] = Counter()  # epoch -> how many usable trials reported it
        self.by_step: dict[int, list[tuple[float, int]]] = {}  # epoch -> sorted (value, number)
        self.by_last: dict[int, list[tuple[float, int]]] = {}  # last epoch -> the same
        self.live: set[int] = set()  # running or queued, without reports
        self.token: Any = None  # where the storage's feed of changes was last read

    def update(self, trials: Sequence[FrozenTrial]) -> None:
        seen = self.seen
        for t in [t for t in trials if seen.get(t.number) is not t]:
            self._apply(t)

    def update_from(self, trials: Sequence[FrozenTrial], feed: _Feed | None) -> None:
        """Bring the index up to `trials` (every trial of the study): through the storage's
        `feed` of the trials that changed (`StudyMirror.trial_changes`: what changed since the
        last look, not the whole study), else by looking at every trial."""
        if feed is None:
            self.update(trials)
            return
        self.token, changed = feed(self.token)
        self.update(trials if changed is None else changed)

    def _apply(self, t: FrozenTrial) -> None:
        number = t.number
        self.seen[number] = t
        usable = bool(t.params) and t.state != TrialState.FAIL
        new = _reports(t) if usable else {}
        old = self.reports.get(number, {})
        if new != old:
            for step, value in old.items():
                self.counts[step] -= 1
                _remove(self.by_step[step], (value, number))
            if old:
                last = max(old)
                _remove(self.by_last[last], (old[last], number))
            for step, value in new.items():
                self.counts[step] += 1
                bisect.insort(self.by_step.setdefault(step, []), (value, number))
            if new:
                last = max(new)
                bisect.insort(self.by_last.setdefault(last, []), (new[last], number))
        if usable:
            self.reports[number] = dict(new)
        else:
            self.reports.pop(number, None)
        if usable and not new and t.state in _LIVE:
            self.live.add(number)
        else:
            self.live.discard(number)

    def level(self, min_points: int) -> int | None:
        return max((s for s, n in self.counts.items() if n >= min_points), default=None)

    def best_at(self, step: int, n: int, maximize: bool) -> list[int]:
        return self.best_of(self.by_step.get(step, []), n, maximize)

    def best_below(self, level: int, n: int, maximize: bool) -> list[int]:
        """The best `n` trials that stopped below `level`, as TPE ranks pruned trials: by the
        last epoch reached, then by the value there."""
        out: list[int] = []
        for last in sorted((s for s in self.by_last if s < level), reverse=True):
            out += self.best_of(self.by_last[last], n - len(out), maximize)
            if len(out) >= n:
                break
        return out

    @staticmethod
    def best_of(entries: list[tuple[float, int]], n: int, maximize: bool) -> list[int]:
        picked = (entries[-n:][::-1] if maximize else entries[:n]) if n > 0 else []
        return [number for _, number in picked]


def _remove(entries: list[tuple[float, int]], entry: tuple[float, int]) -> None:
    i = bisect.bisect_left(entries, entry)
    if i < len(entries) and entries[i] == entry:
        del entries[i]


_INDEXES: weakref.WeakKeyDictionary[Any, dict[int, _Index]] = weakref.WeakKeyDictionary()
_INDEXES_LOCK = threading.Lock()


def _index_of(study: optuna.Study) -> _Index:
    """The study's index in this process: one per (storage object, study), kept while the
    storage lives (a worker's mirror, a simulation's in-memory storage)."""
    storage = study._storage
    with _INDEXES_LOCK:
        try:
            per_storage = _INDEXES.setdefault(storage, {})
        except TypeError:  # a storage that cannot be weakly referenced: no index kept
            return _Index()
        return per_storage.setdefault(study._study_id, _Index())


def bounded_trials(
    trials: Sequence[FrozenTrial],
    index: _Index,
    *,
    min_points: int,
    maximize: bool,
    best: int = BEST,
    recent: int = RECENT,
    feed: _Feed | None = None,
) -> list[FrozenTrial] | None:
    """The trials to show TPE out of `trials` (sorted by number or not), or None when the
    whole study should be shown (no level yet: too few trials reached any epoch). `feed`: the
    storage's feed of the trials that changed since the index last looked (`trials` is then
    looked at whole only when the feed says so)."""
    with index.lock:
        index.update_from(trials, feed)
        level = index.level(min_points)
        if level is None:
            return None
        keep = set(index.best_at(level, max(best, min_points), maximize))
        if len(keep) < best:
            keep.update(index.best_below(level, best - len(keep), maximize))
        keep.update(index.live)
        seen = index.seen
    tail: list[int] = []
    for t in reversed(trials):
        if len(tail) >= recent:
            break
        if t.params and t.state != TrialState.FAIL:
            tail.append(t.number)
    keep.update(tail)
    return sorted((seen[n] for n in keep if n in seen), key=lambda t: t.number)


class BoundedFidelitySampler(FidelitySampler):
    """`FidelitySampler` that shows its inner sampler at most about `best + recent` trials
    (plus those running without reports) once the study has more than `start` trials."""

    def __init__(
        self,
        inner: optuna.samplers.BaseSampler,
        mode: Any = "rung",
        min_points: int = 10,
        *,
        best: int = BEST,
        recent: int = RECENT,
        start: int = START,
    ) -> None:
        super().__init__(inner, mode=mode, min_points=min_points)
        self.best, self.recent, self.start = best, recent, start

    def _view(self, study: optuna.Study, trial: FrozenTrial) -> optuna.Study:
        trials = study._get_trials(deepcopy=False, use_cache=True)
        key = (trial.number, len(trials))
        if self._cached is None or self._cached[:2] != key:
            shown: Sequence[FrozenTrial] = trials
            if self.mode == "rung" and len(trials) > self.start:
                kept = bounded_trials(
                    trials,
                    _index_of(study),
                    min_points=self.min_points,
                    maximize=study.direction == StudyDirection.MAXIMIZE,
                    best=self.best,
                    recent=self.recent,
                    # The worker's mirror says which trials changed since the last sample:
                    # the index reads those, not the whole study (search.sampling.mirror).
                    feed=getattr(study._storage, "trial_changes", None),
                )
                if kept is not None:
                    shown = kept
            view = _StudyView(study, fidelity_view(shown, self.mode, self.min_points))
            self._cached = (*key, view)
        return self._cached[2]


def bound(
    sampler: optuna.samplers.BaseSampler,
    *,
    best: int = BEST,
    recent: int = RECENT,
    start: int = START,
) -> optuna.samplers.BaseSampler:
    """`sampler` with the bounded view when it is a `FidelitySampler` in "rung" mode whose
    inner sampler is TPE (the default); any other sampler is returned as it is."""
    if (
        type(sampler) is not FidelitySampler
        or sampler.mode != "rung"
        or not isinstance(sampler.inner, optuna.samplers.TPESampler)
    ):
        return sampler
    return BoundedFidelitySampler(
        sampler.inner,
        mode=sampler.mode,
        min_points=sampler.min_points,
        best=best,
        recent=recent,
        start=start,
    )
