"""Which configurations `hpsearch estimate` measures: the middle of the space, each parameter's
ends, all low, all high, and a few random samples."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from search.study.space import CategoricalParam, IntParam, Param, Scalar
from search.terminal import format_value

__all__ = ["Configuration", "configurations", "param_ends"]


@dataclass(frozen=True)
class Configuration:
    """One row of the estimate: a label ("center", "width=64", "sample 2") and its params."""

    label: str
    params: dict[str, Any]


def configurations(space: tuple[Param, ...], *, samples: int, seed: int) -> list[Configuration]:
    """The middle of the space; each parameter at its low and high end (others in the middle);
    all low; all high; `samples` random points. Duplicates are dropped (first label wins)."""
    center = {p.name: p.center() for p in space}
    rows = [Configuration("center", center)]
    ends = {p.name: param_ends(p) for p in space}
    for p in space:
        for value in ends[p.name]:
            rows.append(Configuration(f"{p.name}={format_value(value)}", {**center, p.name: value}))
    if len(space) > 1:
        rows.append(Configuration("all low", {n: e[0] for n, e in ends.items()}))
        rows.append(Configuration("all high", {n: e[-1] for n, e in ends.items()}))
    rng = random.Random(seed)
    for i in range(samples):
        rows.append(Configuration(f"sample {i + 1}", {p.name: _sample(p, rng) for p in space}))
    unique: list[Configuration] = []
    for row in rows:
        if all(row.params != seen.params for seen in unique):
            unique.append(row)
    return unique


def param_ends(p: Param) -> list[Scalar]:
    """[low, high]; a categorical's smallest and largest choice (first and last if not all
    numbers)."""
    if isinstance(p, CategoricalParam):
        numbers = [c for c in p.choices if isinstance(c, (int, float)) and not isinstance(c, bool)]
        if len(numbers) == len(p.choices):
            return [min(numbers), max(numbers)]
        return [p.choices[0], p.choices[-1]]
    return p.grid_values(2)


def _sample(p: Param, rng: random.Random) -> Scalar:
    if isinstance(p, CategoricalParam):
        return rng.choice(p.choices)
    if p.log:
        value = math.exp(rng.uniform(math.log(p.low), math.log(p.high)))
    else:
        value = rng.uniform(p.low, p.high)
    if isinstance(p, IntParam):
        steps = round((value - p.low) / p.step)
        return min(p.high, p.low + steps * p.step)
    if p.step is not None:
        return min(p.high, p.low + round((value - p.low) / p.step) * p.step)
    return min(p.high, max(p.low, value))
