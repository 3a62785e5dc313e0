"""When early epochs mislead: the lowest rung ASHA may stop a trial at, measured as the study runs.

Promotion ASHA ranks trials at rungs after 1, 3, 9, ... epochs and trains on only the top
1/eta of each rung. On some tasks the ranking after a few epochs is not the ranking after
many (a learning rate that starts slowly and ends best, dropout that pays off late): the
rung then throws away the configurations that would have won, and the study ends below
random search without pruning. Whether a rung misleads is measurable in the study itself
(Hyper-Tune, Li et al. 2022, weighs its brackets by how well each fidelity ranks
configurations as the highest one does; here consecutive rungs are compared): among the
trials that reached both rung `k` and the next one, the rank correlation (Spearman's rho) of
their values at the two rungs. When it is low once enough
trials have reached both, rung `k` is *retired*: new trials train past it without pausing
(their first pause is at the next rung), so the study spends more epochs per configuration
where its early epochs do not tell configurations apart. Retiring is for good (a study's
schedule only moves up), and it goes on rung by rung: if the next rung misleads too, it goes
as well, up to the last rung, which has no rung above it to be judged against and stays.

The correlation is measured among promoted trials only (the best third of the lower rung): a
range-restricted sample, so its rho sits below the population's even where the ranking is
sound. `THRESHOLD` and `MIN_PAIRS` were set on the development suite of LCBench
(bench/efficiency/design.py, bench/BENCHMARKS.md "Design on the development suite").

Ten pairs are few (rho's standard error there is about 0.25): a kept rung is judged again on
the first 2 x and 4 x `MIN_PAIRS` trials (`RECHECKS`), and retired if it fails any of the
three. On LCBench 126029, seed 2, the first 10 trials gave 0.76, the first 20 gave 0.40, and
the study, which kept its first rung, ended 7 points below the other seeds
(bench/BENCHMARKS.md "A kept rung judged again").

The same function decides in the simulation (bench/efficiency/simulate.py) and in the
workers (`search.worker.budget_and_promotion.Promoter`, from the study's `trial_rungs` rows).

Example::

    >>> spearman([1, 2, 3, 4], [10, 20, 30, 40])
    1.0
    >>> spearman([1, 2, 3, 4], [40, 30, 20, 10])
    -1.0
    >>> rows = [(t, 1, v) for t, v in enumerate([5, 4, 3, 2, 1])]
    >>> rows += [(t, 3, v) for t, v in enumerate([1, 2, 3, 4, 5])]   # reversed at rung 3
    >>> first_active_level([1, 3, 9], rows, maximize=True, threshold=0.3, min_pairs=5)
    3
    >>> first_active_level([1, 3, 9], rows[:8], maximize=True, min_pairs=5)   # 3 pairs: kept
    1
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence

__all__ = [
    "MIN_PAIRS",
    "RECHECKS",
    "THRESHOLD",
    "RungSchedule",
    "first_active_level",
    "rung_correlations",
    "spearman",
]

THRESHOLD = 0.5
"""A rung whose rank correlation with the next rung is below this is retired (0.5 and 0.3
were measured on the development suite: 0.5 retired rungs on two instances more, and did
better on both, bench/BENCHMARKS.md)."""

MIN_PAIRS = 10
"""Trials that must have reached both rungs before the correlation is trusted."""

RECHECKS = 2
"""How many times a kept rung is judged again, each time on twice as many trials (10, 20, 40)."""


def _ranks(values: Sequence[float]) -> list[float]:
    """Ranks 1..n, ties sharing their average rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation of paired values (ties: average ranks); NaN when either side
    is constant or fewer than two pairs."""
    if len(x) != len(y):
        raise ValueError("x and y must have the same length")
    if len(x) < 2:
        return math.nan
    rx, ry = _ranks(x), _ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    if sxx == 0 or syy == 0:
        return math.nan
    return sxy / math.sqrt(sxx * syy)


def _by_level(
    rows: Iterable[tuple[int, int, float]], maximize: bool
) -> dict[int, dict[int, float]]:
    out: dict[int, dict[int, float]] = {}
    for trial, level, value in rows:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            score = -math.inf
        else:
            score = value if maximize else -value
        out.setdefault(level, {})[trial] = score
    return out


def _paired(
    at: dict[int, dict[int, float]], low: int, high: int
) -> tuple[dict[int, float], dict[int, float], list[int]]:
    """Rung `low`'s and rung `high`'s scores by trial, and the trials at both, by trial id."""
    a, b = at.get(low, {}), at.get(high, {})
    return a, b, sorted(set(a) & set(b))


def _rho(a: dict[int, float], b: dict[int, float], trials: Sequence[int]) -> float:
    """Spearman's rho of `trials`' scores at two rungs."""
    return spearman([a[t] for t in trials], [b[t] for t in trials])


def rung_correlations(
    levels: Sequence[int],
    rows: Iterable[tuple[int, int, float]],
    *,
    maximize: bool,
    min_pairs: int = MIN_PAIRS,
) -> list[tuple[int, int, float]]:
    """For each rung level and the next, (level, pairs, rho): Spearman's rho of the values at
    the two rungs of the first `min_pairs` trials (by trial id) that reached both, and how many
    did (up to `min_pairs`). `rows`: (trial, level, value) of every trial at every rung it
    reached; NaN values rank worst."""
    at = _by_level(rows, maximize)
    out = []
    for low, high in itertools.pairwise(levels):
        a, b, both = _paired(at, low, high)
        first = both[:min_pairs]
        out.append((low, len(first), _rho(a, b, first)))
    return out


def judged_at(min_pairs: int, rechecks: int) -> list[int]:
    """The numbers of trials (at both rungs) on which a pair of rungs is judged."""
    return [min_pairs * 2**k for k in range(rechecks + 1)]


def first_active_level(
    levels: Sequence[int],
    rows: Iterable[tuple[int, int, float]],
    *,
    maximize: bool,
    threshold: float = THRESHOLD,
    min_pairs: int = MIN_PAIRS,
    rechecks: int = RECHECKS,
) -> int | None:
    """The lowest rung level at which new trials pause: from the bottom up, a rung is retired
    when the values of the first n trials (by trial id) that reached it and the next rung rank
    them with a Spearman correlation below `threshold`, for any n of `judged_at(min_pairs,
    rechecks)` that so many trials have reached (a NaN correlation, all values tied, is trusted).

    `levels`: one bracket's rung levels, ascending, below the full training length; the last
    rung has no rung above it to be judged against and is never retired. Each judgement is on
    a fixed set of trials, so it never goes back as the study grows (a later trial with a lower
    id promoted late can change it, rarely)."""
    return _first_active(
        levels, _by_level(rows, maximize), threshold, judged_at(min_pairs, rechecks)
    )


def _first_active(
    levels: Sequence[int], at: dict[int, dict[int, float]], threshold: float, sizes: list[int]
) -> int | None:
    """`first_active_level` of the scores `at` each rung, judged on the first n trials for each
    n of `sizes`."""
    if not levels:
        return None
    for low, high in itertools.pairwise(levels):
        a, b, both = _paired(at, low, high)
        rhos = [_rho(a, b, both[:n]) for n in sizes if len(both) >= n]
        if any(rho < threshold for rho in rhos if not math.isnan(rho)):
            continue  # retired: judge the next pair
        return low
    return levels[-1]


class RungSchedule:
    """One study's lowest active rung, as a worker keeps it: `first_active_level` of the rung
    table's rows, until the decision is settled (the lowest kept rung was judged on all its
    trials, the last of `judged_at`, or it is the last rung); after that it reads nothing more.

    Only single-bracket ASHA adapts (Hyperband's brackets already start higher)."""

    def __init__(
        self,
        levels: Sequence[int],
        *,
        maximize: bool,
        threshold: float = THRESHOLD,
        min_pairs: int = MIN_PAIRS,
        rechecks: int = RECHECKS,
    ) -> None:
        self.levels = list(levels)
        self.maximize, self.threshold, self.min_pairs = maximize, threshold, min_pairs
        self.rechecks = rechecks
        self.level: int | None = self.levels[0] if self.levels else None
        self.settled = len(self.levels) <= 1

    def update(self, rows: Iterable[tuple[int, int, float]]) -> int | None:
        """The lowest active rung given every trial's (trial, level, value) at its rungs; it
        only moves up. Sets `settled` once it cannot move any more."""
        if self.settled:
            return self.level
        at = _by_level(rows, self.maximize)
        sizes = judged_at(self.min_pairs, self.rechecks)
        level = _first_active(self.levels, at, self.threshold, sizes)
        order = {lvl: i for i, lvl in enumerate(self.levels)}
        if self.level is not None and level is not None and order[level] > order[self.level]:
            self.level = level
        # Settled: the kept rung's pair was judged on its last set of trials, or no pair is left.
        assert self.level is not None
        index = order[self.level]
        if index == len(self.levels) - 1:
            self.settled = True
        else:
            both = _paired(at, self.levels[index], self.levels[index + 1])[2]
            self.settled = len(both) >= sizes[-1]
        return self.level

    def pauses_at(self, epoch: int) -> bool:
        """Whether a trial pauses at rung level `epoch` under the current schedule."""
        return self.level is not None and epoch >= self.level and epoch in self.levels
