"""A model-free floor for bench/efficiency/runner.py: synchronous successive halving, bracket
after bracket, on random configurations (``sh-bracket``).

One bracket (eta 3, rungs 1, 3, 9, 27 and 50 = `EPOCHS` epochs): 243 configurations drawn
uniformly from the space (log-uniformly where the space is log) train 1 epoch; the best third by
their score at the rung (ties keep their order) go on to 3 epochs, the best third of those
to 9, then 27, then 50. A promoted configuration resumes where it stopped (it trains 3 - 1 = 2
more epochs to reach rung 3, as from a checkpoint), and every epoch trained is charged. Within a
rung configurations train one after another, best first. One bracket is 243 + 81 x 2 + 27 x 6 +
9 x 18 + 3 x 23 = 798 epochs; its first full-length trial ends at epoch 752 of the bracket. When
the budget is larger, further brackets draw new configurations; the study stops at exactly the
budget (the epoch running then is the last: a configuration cut off there is not finished).

Example::

    >>> def scores_at(configs, epoch):  # a toy surrogate: the higher x, the better
    ...     return [c["x"] * epoch for c in configs]
    >>> space = {"x": {"type": "float", "low": 0.0, "high": 1.0}}
    >>> run = sh_bracket_study(scores_at, 798, seed=0, space=space)
    >>> run.epochs, [at for at, _ in run.finished]
    (798, [752, 775, 798])
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from bench.efficiency.lcbench import EPOCHS, SPACE
from bench.efficiency.stats import Run

__all__ = ["ETA", "N_CONFIGS", "RUNGS", "bracket_epochs", "random_config", "sh_bracket_study"]

ETA = 3
N_CONFIGS = 243
RUNGS = (1, 3, 9, 27, EPOCHS)
"""Epochs at the end of each rung of one bracket."""


def bracket_epochs(n: int = N_CONFIGS, rungs: tuple[int, ...] = RUNGS, eta: int = ETA) -> int:
    """Epochs one whole bracket trains."""
    total, before = 0, 0
    for rung in rungs:
        total += n * (rung - before)
        before, n = rung, max(1, n // eta)
    return total


def random_config(rng: np.random.Generator, space: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One configuration drawn uniformly from an hpsearch `[space]` table (log-uniformly where
    `log`; integers rounded after drawing on [low - 0.5, high + 0.5], as Optuna does)."""
    out: dict[str, Any] = {}
    for name, p in space.items():
        if p["type"] == "categorical":
            out[name] = p["choices"][int(rng.integers(len(p["choices"])))]
            continue
        low, high = float(p["low"]), float(p["high"])
        if p["type"] == "int":
            low, high = low - 0.5, high + 0.5
        if p.get("log"):
            x = math.exp(rng.uniform(math.log(low), math.log(high)))
        else:
            x = rng.uniform(low, high)
        if p["type"] == "int":
            x = int(min(max(round(x), p["low"]), p["high"]))
        out[name] = x
    return out


def sh_bracket_study(
    scores_at: Callable[[list[dict[str, Any]], int], list[float]],
    budget: int,
    seed: int,
    space: dict[str, dict[str, Any]] = SPACE,
) -> Run:
    """Brackets of synchronous successive halving until `budget` epochs are trained. The values
    in the returned run are scores (higher is better): `scores_at(configs, epoch)` gives the
    configurations' scores at a trained epoch (LCBench.scores_at: one surrogate call a rung)."""
    rng = np.random.default_rng(seed)
    used, finished, configs, brackets = 0, [], 0, 0
    while used < budget:
        brackets += 1
        alive = [random_config(rng, space) for _ in range(N_CONFIGS)]
        configs += len(alive)
        before = 0
        for k, rung in enumerate(RUNGS):
            # Those this rung trains to its end before the budget runs out.
            done = min(len(alive), (budget - used) // (rung - before))
            scores = scores_at(alive[:done], rung) if done else []
            for i in range(done):
                used += rung - before
                if rung == EPOCHS:
                    finished.append((used, scores[i]))
            if done < len(alive):  # the budget ends inside the next one's epochs
                used = budget
                break
            if k + 1 < len(RUNGS):
                order = sorted(range(len(alive)), key=lambda i: -scores[i])
                alive = [alive[i] for i in order[: max(1, len(alive) // ETA)]]
            before = rung
    return Run(finished, used, {"trials": configs, "brackets": brackets})
