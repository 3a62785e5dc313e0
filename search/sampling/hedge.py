"""Hedged trials: one trial in `EVERY` drawn at random and first judged at a higher rung.

TPE fitted across fidelities and ASHA's rungs can settle together on configurations that start
fast. On LCBench 167181 one-layer networks lead after one epoch (60-74 against 37-58) and end
13 points below five-layer ones: a five-layer trial is stopped at rung 1 or 3, TPE counts it
bad and stops proposing the depth, and the rung rule (`search.pruning.adaptive`) cannot see the
problem, since the trials it compares were all promoted and all one-layer. 5 of 40 seeds ended
stuck at 78-87 where the others reach 91-94, and the mean final fell below random search's.

The hedge, as in Hyperband's brackets that start higher and BOHB's random share: trial numbers
9, 19, 29, ... are drawn at random (not by TPE) and train past the lowest rungs without pausing;
they are first judged at the third rung (9 epochs where rungs lie at 1, 3, 9, 27), against the
trials recorded there, and promoted from it like any other. TPE sees them as it sees every
trial. In simulation, on 40 seeds of 167181 no seed stuck (worst 90.4); on 20 seeds of the
24 LCBench development instances as many seeds reached random search's final as without it
(472 against 470 of 480), no instance ended below random search, and the median speedup fell
from 12.8x to 9.7x: the price of the hedge (bench/BENCHMARKS.md, "A cheaper hedge, and the
rule that decides one"). Judged at rung 3 instead, one trial in ten or in five, 3 and 1 seeds
of 167181 still stuck.

Only for single-bracket ASHA with a sampler fitted across fidelities (`uses_fidelities`), and
only where a rung lies above the hedged one (four rungs or more): Hyperband's brackets already
start higher, random search needs no hedge, and with three rungs the hedged trial would skip
to the last one, which was not measured.

Example::

    >>> [n for n in range(30) if hedged(n)]
    [9, 19, 29]
    >>> hedge_level([1, 3, 9, 27])
    9
    >>> hedge_level([1, 3, 9]) is None
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from search.pruning.promotion import Rungs
from search.sampling.multifidelity import uses_fidelities

__all__ = ["EVERY", "RUNG", "describe", "hedge_level", "hedged", "is_hedge", "study_hedge_level"]

EVERY = 10
"""One trial in `EVERY` is hedged: numbers EVERY - 1, 2 x EVERY - 1, ..."""

RUNG = 2
"""The hedged trial's first rung: this index of the rung levels (the third rung)."""


def hedged(number: int) -> bool:
    """Whether trial `number` is a hedge (where the study hedges: `study_hedge_level`)."""
    return number % EVERY == EVERY - 1


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


def is_hedge(config: Any, number: int) -> bool:
    """Whether trial `number` of the study is a hedge."""
    return hedged(number) and study_hedge_level(config) is not None


def describe(config: Any, number: int) -> str | None:
    """What the trial-start log line says of a hedged trial; None for the others."""
    level = study_hedge_level(config) if hedged(number) else None
    if level is None:
        return None
    return (
        f"a hedge: drawn at random, first judged at epoch {level} "
        f"(one trial in {EVERY}, search.sampling.hedge)"
    )
