"""Hedged trials: now and then a trial drawn at random and first judged at a higher rung, the
gap to the next one growing while the hedges lose.

TPE fitted across fidelities and ASHA's rungs can settle together on configurations that start
fast. On LCBench 167181 one-layer networks lead after one epoch (60-74 against 37-58) and end
13 points below five-layer ones: a five-layer trial is stopped at rung 1 or 3, TPE counts it
bad and stops proposing the depth, and the rung rule (`search.pruning.adaptive`) cannot see the
problem, since the trials it compares were all promoted and all one-layer. 5 of 40 seeds ended
stuck at 78-87 where the others reach 91-94, and the mean final fell below random search's.

The hedge, as in Hyperband's brackets that start higher and BOHB's random share: a hedged trial
is drawn at random (not by TPE) and trains past the lowest rungs without pausing; it is first
judged at the third rung (9 epochs where rungs lie at 1, 3, 9, 27), against the trials recorded
there, and promoted from it like any other. TPE sees it as it sees every trial.

Which trials: trial 9 is the first hedge. The gap to the next one starts at `EVERY` trials and
doubles, up to `LONGEST`, for each hedge in a row (the latest first) judged at its rung and not
promoted past it; a hedge promoted past its rung sets the gap back to `EVERY`. A hedge not yet
judged (still training towards its rung, or handed back by a machine that died) counts neither
way: with parallel workers the next trials are sampled while the first hedge trains, so a few
more hedges come early (9, 19, 29, 69, ... where one worker hedges 9, 29, 69, ...). Counting
it as lost, as the one-worker simulation reads it, was measured and not kept: 7.8x against
8.9x with 8 workers, 6.8x against 7.7x with 32 (bench/BENCHMARKS.md, "Hedges with parallel
workers"). Where every hedge loses, as nearly everywhere: trials 9, 29, 69, 109, 149, ... A hedge
costs a few epochs of a random configuration each time, and it rarely wins (1 in 57 promoted
past rung 9 on two LCBench instances): its value is in what TPE learns from its rung-9 result.
In simulation on 20 seeds of the 24 LCBench development instances (bench/BENCHMARKS.md, "A
hedge that spaces out while it loses"): median speedup to random search's final 11.2x (one in
ten hedged: 9.7x; none: 12.8x, with seeds stuck), 474 of 480 seeds reaching it (472; 470), no
instance ending below random search; 167181 on 40 seeds: no seed stuck (worst 92.1).

The decision is made where the trial is sampled, under the study's sampling lock, from the
trials the sampler sees (`is_next_hedge`), and recorded with the trial as the system attribute
`HEDGE_ATTR` (the epoch it is first judged at): the promoter (`Promoter.pauses_at`), the
trial-start log line and a worker that resumes the trial after a preemption read it there.
A trial a user enqueued is never a hedge (`hpsearch enqueue` into a queued hedge drops the
attribute).

Only for single-bracket ASHA with a sampler fitted across fidelities (`uses_fidelities`), and
only where a rung lies above the hedged one (four rungs or more): Hyperband's brackets already
start higher, random search needs no hedge, and with three rungs the hedged trial would skip
to the last one, which was not measured.

Example::

    >>> is_next_hedge(9, []), is_next_hedge(28, [(9, False)]), is_next_hedge(29, [(9, False)])
    (True, False, True)
    >>> is_next_hedge(19, [(9, True)])
    True
    >>> hedge_level([1, 3, 9, 27]), hedge_level([1, 3, 9]) is None
    (9, True)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from optuna.trial import FrozenTrial

from search.db.enqueued import HEDGE_ATTR
from search.pruning.promotion import Rungs
from search.sampling.multifidelity import uses_fidelities

__all__ = [
    "EVERY",
    "HEDGE_ATTR",
    "LONGEST",
    "RUNG",
    "describe",
    "hedge_level",
    "is_next_hedge",
    "next_is_hedge",
    "outcome",
    "study_hedge_level",
]

EVERY = 10
"""The gap, in trials, from one hedge to the next while the last one won (and before trial 9,
the first hedge)."""

LONGEST = 40
"""The longest gap: reached after two hedges in a row that lost."""

RUNG = 2
"""The hedged trial's first rung: this index of the rung levels (the third rung)."""


def is_next_hedge(number: int, earlier: Iterable[tuple[int, bool | None]]) -> bool:
    """Whether trial `number` is a hedge, given the study's hedges before it, the latest first,
    as (number, promoted): True if promoted past its first rung, False if judged there and not
    promoted, None if not judged yet. Reads only as many as it needs (the iterable may be lazy).
    """
    last, gap = None, EVERY
    for n, promoted in earlier:
        if last is None:
            last = n
            if number - last >= LONGEST:
                return True
        if promoted:
            break
        if promoted is False:
            gap = min(2 * gap, LONGEST)
            if gap == LONGEST:
                break
    return number - (-1 if last is None else last) >= gap


def outcome(trial: FrozenTrial, level: int) -> bool | None:
    """A hedge's outcome as `is_next_hedge` reads it: promoted past `level` (True), judged
    there or finished without (False), or not judged yet (None)."""
    reached = max(trial.intermediate_values, default=0)
    if reached > level:
        return True
    if reached >= level or trial.state.is_finished():
        return False
    return None


def next_is_hedge(trials: Sequence[FrozenTrial], number: int) -> bool:
    """`is_next_hedge` for trial `number` of a study whose trials (sorted by number, as a
    sampler sees them) are `trials`: the hedges are the ones with `HEDGE_ATTR`. Scans back
    from the end, no further than it must (about three hedges)."""

    def hedges() -> Iterable[tuple[int, bool | None]]:
        found = False
        for trial in reversed(trials):
            if trial.number >= number:
                continue
            if not found and trial.number < number - LONGEST:
                return  # none in the last LONGEST trials: the gap is no longer than that
            level = trial.system_attrs.get(HEDGE_ATTR)
            if level is not None:
                found = True
                yield trial.number, outcome(trial, int(level))

    return is_next_hedge(number, hedges())


def hedge_level(levels: Sequence[int]) -> int | None:
    """The first rung (epochs) of a hedged trial given one bracket's rung levels, or None (no
    hedge) unless a rung lies above it."""
    return levels[RUNG] if len(levels) > RUNG + 1 else None


def study_hedge_level(config: Any) -> int | None:
    """The first rung of a study's hedged trials (a StudyConfig), or None if it hedges none."""
    p = config.pruner
    if p.type != "asha" or not uses_fidelities(config):
        return None
    return hedge_level(Rungs(p.min_resource, p.reduction_factor, config.task.epochs).levels(0))


def describe(level: int) -> str:
    """What the trial-start log line says of a hedged trial first judged at epoch `level`."""
    return (
        f"a hedge: drawn at random, first judged at epoch {level} (the gap to the next grows "
        f"from {EVERY} to {LONGEST} trials while hedges lose; search.sampling.hedge)"
    )
