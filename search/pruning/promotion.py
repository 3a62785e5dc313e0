"""Promotion-based asynchronous successive halving (ASHA with pause and resume): the rule alone.

Li et al. 2020 ("A system for massively parallel hyperparameter tuning", Algorithm 2), as
syne-tune's ``type="promotion"`` and AutoGluon's ``hyperband_promotion`` decide it: rungs lie at
``min_resource * reduction_factor**k`` epochs below ``max_resource``. A trial that reaches a rung
pauses there. A free worker looks at the rungs from the top down for a paused trial that ranks
in the top ``1/reduction_factor`` of *all* trials recorded at its rung (``floor(n / eta)`` of
them) and resumes the best such trial; if there is none, it starts a new trial. Unlike a
stop-only pruner, a trial that ranked poorly when it arrived early is promoted later once enough
worse trials have arrived, and the first trials of a rung never pass for free.

Several brackets (Hyperband, `Rungs(..., brackets=...)`): bracket b's first rung is
``min_resource * eta**b``; a trial's bracket is drawn from its number and the study's seed,
with the weights of synchronous Hyperband's bracket sizes (most trials in the most aggressive
bracket). Trials are ranked only against trials of their own bracket.

No I/O here: the database side is `search.db.pauses`, the worker side
`search.worker.budget_and_promotion`.
Values are the study's metric as reported; ``maximize`` says which way is better.

Example::

    >>> rungs = Rungs(min_resource=1, reduction_factor=3, max_resource=27)
    >>> rungs.levels(0)
    [1, 3, 9]
    >>> table = RungTable(maximize=True)
    >>> for trial_id, value in enumerate([0.5, 0.7, 0.6]):
    ...     table.record(trial_id, 0, 1, value)
    >>> table.is_promotable(0, 1, 0.7, reduction_factor=3)   # top floor(3 / 3) = 1 of 3
    True
    >>> table.is_promotable(0, 1, 0.6, reduction_factor=3)
    False
    >>> table.goes_on(3, 0, 1, 0.8, reduction_factor=3)   # a 4th arrives: top 1 of 4
    True
    >>> paused = [Paused(trial_id=1, bracket=0, level=1, value=0.7)]
    >>> table.next_to_resume(paused, reduction_factor=3).trial_id
    1
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["Paused", "RungTable", "Rungs", "promotable_count"]


@dataclass(frozen=True)
class Rungs:
    """Where trials pause: the rung levels (epochs) of each bracket."""

    min_resource: int
    reduction_factor: int
    max_resource: int
    """Epochs of a fully trained trial (task.epochs): reaching it completes the trial."""
    brackets: int = 1
    """1 for ASHA; Hyperband: up to `max_brackets()`."""

    def levels(self, bracket: int = 0) -> list[int]:
        """Rung levels of `bracket`, in epochs, below max_resource: where a trial pauses (or a
        stopping pruner may stop it). Not max_resource itself: a trial that reaches it has
        completed, there is nothing left to promote it to or save by stopping it (syne-tune's
        rung levels lie below max_t too). Every rung list of the search is this one: the
        worker's (`search.pruning.pruners.rung_steps`) and the promoter's."""
        out, level = [], self.min_resource * self.reduction_factor**bracket
        while level < self.max_resource:
            out.append(level)
            level *= self.reduction_factor
        return out

    def max_brackets(self) -> int:
        """Hyperband's number of brackets: one per rung of bracket 0, plus the bracket that
        trains every trial fully."""
        return len(self.levels(0)) + 1

    def next_level(self, bracket: int, level: int) -> int:
        """The rung after `level` in `bracket` (max_resource after the last)."""
        for candidate in self.levels(bracket):
            if candidate > level:
                return candidate
        return self.max_resource

    def bracket_of(self, number: int, seed: int = 0) -> int:
        """The bracket of trial `number`: drawn from (seed, number), weighted by synchronous
        Hyperband's bracket sizes n_s = ceil((s_max + 1) / (s + 1) * eta**s), s halvings."""
        if self.brackets <= 1:
            return 0
        s_max = self.brackets - 1
        eta = self.reduction_factor
        # Bracket b halves s = s_max - b times.
        weights = [
            math.ceil((s_max + 1) / (s_max - b + 1) * eta ** (s_max - b))
            for b in range(self.brackets)
        ]
        digest = hashlib.blake2b(f"{seed}:{number}".encode(), digest_size=8).digest()
        u = int.from_bytes(digest, "big") / 2**64 * sum(weights)
        for b, w in enumerate(weights):
            if u < w:
                return b
            u -= w
        return self.brackets - 1

    def pauses_at(self, bracket: int, epoch: int) -> bool:
        return epoch in self.levels(bracket)


@dataclass(frozen=True)
class Paused:
    """A trial sitting paused at a rung, not yet promoted from it."""

    trial_id: int
    bracket: int
    level: int
    value: float


def promotable_count(recorded: int, reduction_factor: int, *, draining: bool = False) -> int:
    """How many of the `recorded` trials at a rung may be promoted from it: floor(n / eta);
    while draining (no new trial may start), ceil(n / eta), so that the last trials of a small
    rung are not stranded."""
    if draining:
        return -(-recorded // reduction_factor)
    return recorded // reduction_factor


@dataclass
class RungTable:
    """The values recorded at each (bracket, rung level): every trial that reached the rung,
    paused, promoted, or stopped there since. Kept sorted; `record` is idempotent per trial.

    The one statement of the rule. Where the decision must be taken in the database (atomic
    across workers), `search.db.pauses` restates it in SQL, and
    `tests/search/db/test_promotion_rule.py` checks the SQL against this class on generated
    rung tables. Optuna's stopping successive halving ranks on the same table
    (`search.pruning.pruner`), with Optuna's own thresholds.
    """

    maximize: bool
    _scores: dict[tuple[int, int], list[tuple[int, float]]] = field(default_factory=dict)
    _seen: dict[tuple[int, int], dict[int, tuple[int, float]]] = field(default_factory=dict)

    def record(self, trial_id: int, bracket: int, level: int, value: float) -> None:
        key = (bracket, level)
        seen = self._seen.setdefault(key, {})
        score = self._score(value)
        scores = self._scores.setdefault(key, [])
        if trial_id in seen:
            if seen[trial_id] == score:
                return
            scores.pop(bisect.bisect_left(scores, seen[trial_id]))
        seen[trial_id] = score
        bisect.insort(scores, score)

    def recorded(self, bracket: int, level: int) -> int:
        return len(self._scores.get((bracket, level), ()))

    def rank(self, bracket: int, level: int, value: float) -> int:
        """How many recorded trials at the rung are strictly better than `value`."""
        scores = self._scores.get((bracket, level), [])
        return len(scores) - bisect.bisect_right(scores, self._score(value))

    def standing(self, trial_id: int, bracket: int, level: int, value: float) -> tuple[int, int]:
        """(trials competing at the rung, how many of them are strictly better than `value`),
        the trial counted once, with `value`: a value it recorded there before is replaced,
        not a competitor."""
        own = self._seen.get((bracket, level), {}).get(trial_id)
        competing = self.recorded(bracket, level) + (0 if own is not None else 1)
        better = self.rank(bracket, level, value)
        if own is not None and own > self._score(value):
            better -= 1
        return competing, better

    def is_promotable(
        self,
        bracket: int,
        level: int,
        value: float,
        *,
        reduction_factor: int,
        draining: bool = False,
    ) -> bool:
        """Whether a trial recorded at the rung with `value` ranks in its top
        1/reduction_factor (`promotable_count`)."""
        n = self.recorded(bracket, level)
        return self.rank(bracket, level, value) < promotable_count(
            n, reduction_factor, draining=draining
        )

    def goes_on(
        self, trial_id: int, bracket: int, level: int, value: float, *, reduction_factor: int
    ) -> bool:
        """A trial arriving at a rung with `value`: whether it ranks in the top
        floor(n / reduction_factor) of the rung, counted with the trials recorded there (once:
        `standing`), and so goes on at once rather than pause (the promotion a free worker
        would make next anyway)."""
        competing, better = self.standing(trial_id, bracket, level, value)
        return better < promotable_count(competing, reduction_factor)

    def next_to_resume(
        self, paused: Iterable[Paused], *, reduction_factor: int, draining: bool = False
    ) -> Paused | None:
        """The paused trial a free worker resumes: of the promotable ones, the one at the
        highest rung, the best value there first (ties: the lowest trial id). None: start a
        new trial (or, draining, end the paused ones)."""
        candidates = [
            p
            for p in paused
            if self.is_promotable(
                p.bracket, p.level, p.value, reduction_factor=reduction_factor, draining=draining
            )
        ]
        if not candidates:
            return None
        return min(candidates, key=lambda p: (-p.level, _negated(self._score(p.value)), p.trial_id))

    def _score(self, value: float) -> tuple[int, float]:
        """Higher is better; NaN is worst, below every number (infinities included)."""
        if math.isnan(value):
            return (0, 0.0)
        return (1, value if self.maximize else -value)


def _negated(score: tuple[int, float]) -> tuple[int, float]:
    return (-score[0], -score[1])
