"""What `hpsearch compare` runs: the same search under several strategies, at one budget, K repeats
each; the studies planned here, nothing touched.

A strategy is a sampler and a pruner. Every (strategy, repeat) is an ordinary study named
``<name>-<sampler>[-<pruner>]-r<k>`` (no pruner suffix for ``none``), created like `hpsearch
create` does and run by local workers like `hpsearch run` does, so `status`, `worker` and the
dashboard see it as any other study. Running the same command again finds those studies by name
(the same config, so `create` is idempotent), skips the finished ones and finishes the others.

Example::

    >>> from search.study.parse_config import parse_config
    >>> cfg = parse_config({
    ...     "study": {"name": "demo"},
    ...     "task": {"name": "digits", "epochs": 3},
    ...     "space": {"lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
    ...               "dropout": {"type": "float", "low": 0.0, "high": 0.5}},
    ... })
    >>> {k: len(v) for k, v in grid_for_budget(cfg, 9).items()}
    {'lr': 3, 'dropout': 3}
    >>> {k: len(v) for k, v in grid_for_budget(cfg, 10).items()}  # 12 points, 10 of them run
    {'lr': 4, 'dropout': 3}
    >>> [run.name for run in plan_compare(cfg, parse_strategies("grid,tpe", "none", cfg), 9, 1)]
    ['demo-grid-r1', 'demo-tpe-r1']
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from search.sampling.samplers import derived_seed
from search.study.settings import (
    PRUNERS,
    SAMPLERS,
    ConfigError,
    GridSettings,
    PrunerSettings,
    StudyConfig,
)
from search.study.space import CategoricalParam, Param, Scalar

__all__ = [
    "CompareRequest",
    "CompareRun",
    "Strategy",
    "grid_for_budget",
    "grid_minimum",
    "parse_strategies",
    "plan_compare",
]


@dataclass(frozen=True)
class Strategy:
    """A sampler and a pruner (``none``: every trial trains all its epochs)."""

    sampler: str
    pruner: str = "none"

    @property
    def label(self) -> str:
        """``tpe``, ``tpe-hyperband``: the part of the study name that names the strategy."""
        return self.sampler if self.pruner == "none" else f"{self.sampler}-{self.pruner}"


@dataclass(frozen=True)
class CompareRun:
    """One study of a comparison: a strategy's k-th repeat (k counts from 1)."""

    strategy: Strategy
    repeat: int
    config: StudyConfig

    @property
    def name(self) -> str:
        return self.config.study.name

    @property
    def seed(self) -> int:
        return self.config.study.seed


def parse_strategies(samplers: str, pruners: str | None, config: StudyConfig) -> list[Strategy]:
    """Every sampler x pruner of two comma-separated lists; ConfigError names a bad one.

    Without `pruners`, the config's own `[pruner]` type is the only one.
    """
    sampler_names = _names("--samplers", samplers, SAMPLERS)
    pruner_names = (
        [config.pruner.type] if pruners is None else _names("--pruners", pruners, PRUNERS)
    )
    return [Strategy(s, p) for s in sampler_names for p in pruner_names]


def _names(option: str, text: str, known: tuple[str, ...]) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ConfigError(f"{option}: give at least one of {', '.join(known)}")
    for n in names:
        if n not in known:
            raise ConfigError(f"{option}: unknown value {n!r} (choose from {', '.join(known)})")
    if len(set(names)) != len(names):
        raise ConfigError(f"{option}: {text!r} names a value twice")
    return names


def _fixed_values(config: StudyConfig, param: Param) -> list[Scalar] | None:
    """A parameter's grid values when the budget does not choose them (categorical choices,
    explicit `[grid]` values), else None."""
    if param.name in config.grid.values:
        return list(config.grid.values[param.name])
    if isinstance(param, CategoricalParam):
        return list(param.choices)
    return None


def grid_minimum(config: StudyConfig) -> int:
    """The smallest grid: every choice of a categorical (or listed `[grid]` values), and both
    ends of every numeric range."""
    return math.prod(len(_fixed_values(config, p) or [0, 0]) for p in config.space)


def grid_for_budget(config: StudyConfig, budget: int) -> dict[str, list[Scalar]]:
    """Grid values per parameter for a budget of `budget` trials.

    Categorical parameters (and those with `[grid]` values listed) keep all their values. The
    numeric ones start at two points (the ends of their range) and gain one point at a time, the
    one with the fewest points first (the first in `[space]` order on a tie), until the grid has
    at least `budget` points: 9 -> 3 x 3. A budget that is no product of such counts gets the
    smallest such grid above it and runs `budget` of its points, the ones the grid sampler's
    seeded shuffle picks first: 10 -> 4 x 3 = 12 points, 10 of them run. Points are evenly
    spaced over the range, log-spaced where log = true. ConfigError if `budget` is below
    `grid_minimum`, or if no more points fit (integer ranges run out of values).
    """
    minimum = grid_minimum(config)
    if not config.space or minimum < 2:
        raise ConfigError("grid: [space] has nothing to grid (it needs two points at least)")
    if budget < minimum:
        raise ConfigError(
            f"--budget {budget}: below the grid's minimum of {minimum} points (every choice of "
            "a categorical, both ends of each numeric range); raise --budget or leave grid out"
        )
    values = {p.name: _fixed_values(config, p) for p in config.space}
    points = {p.name: 2 for p in config.space if values[p.name] is None}
    grid = {p.name: values[p.name] or p.grid_values(points[p.name]) for p in config.space}
    while math.prod(len(v) for v in grid.values()) < budget:
        growable = [
            p
            for p in config.space
            if p.name in points and len(p.grid_values(points[p.name] + 1)) > len(grid[p.name])
        ]
        if not growable:
            raise ConfigError(
                f"--budget {budget}: more than the {math.prod(map(len, grid.values()))} distinct "
                "points the grid can have over [space]; lower --budget or leave grid out"
            )
        grow = min(growable, key=lambda p: len(grid[p.name]))
        points[grow.name] += 1
        grid[grow.name] = grow.grid_values(points[grow.name])
    return grid


def _pruner_settings(config: StudyConfig, kind: str) -> PrunerSettings:
    if kind == config.pruner.type:
        return config.pruner
    settings = PrunerSettings(type=kind)
    if kind in ("hyperband", "successive_halving", "asha") and (
        settings.min_resource > config.task.epochs
    ):
        raise ConfigError(
            f"--pruners {kind}: its min_resource {settings.min_resource} is more than "
            f"task.epochs = {config.task.epochs}"
        )
    return settings


def plan_compare(
    config: StudyConfig,
    strategies: Sequence[Strategy],
    budget: int | None,
    repeats: int,
    *,
    budget_epochs: int | None = None,
) -> list[CompareRun]:
    """The studies of a comparison, repeat by repeat (so that a comparison stopped half-way has
    the same repeats of every strategy). ConfigError on bad input; nothing is touched here.

    `budget`: trials per study; `budget_epochs`: epochs trained per study, pruned trials'
    included (equal compute): every study gets `[study] budget_epochs` and no trial cap, but
    the grid, which runs budget_epochs // task.epochs of its points (with the budget too).

    Seeds: repeat k of a strategy gets `derived_seed(study.seed, k, "compare:<label>")`, so
    repeats differ in seed and no two strategies share a random stream (TPE's first trials would
    otherwise draw exactly random search's points). The grid visits the same points in every
    repeat; its seed changes the trials' training seeds and the order of the points.
    """
    if budget_epochs is not None:
        if budget_epochs < 1:
            raise ConfigError(f"--budget-epochs: must be >= 1, got {budget_epochs}")
        grid_trials = budget_epochs // config.task.epochs
        if any(s.sampler == "grid" for s in strategies) and grid_trials < grid_minimum(config):
            raise ConfigError(
                f"--budget-epochs {budget_epochs}: {grid_trials} fully trained trials of "
                f"{config.task.epochs} epochs, below the grid's minimum of "
                f"{grid_minimum(config)} points; raise --budget-epochs or leave grid out"
            )
        budget = budget or max(1, grid_trials)
    if budget is None or budget < 1:
        raise ConfigError(f"--budget: must be >= 1, got {budget}")
    if repeats < 1:
        raise ConfigError(f"--repeats: must be >= 1, got {repeats}")
    grid = None
    if any(s.sampler == "grid" for s in strategies):
        grid = grid_for_budget(config, budget)
    runs = []
    for k in range(1, repeats + 1):
        for strategy in strategies:
            seed = derived_seed(config.study.seed, k, f"compare:{strategy.label}")
            study = config.with_study(
                name=f"{config.study.name}-{strategy.label}-r{k}",
                sampler=strategy.sampler,
                seed=seed,
                n_trials=budget if budget_epochs is None or strategy.sampler == "grid" else None,
                budget_epochs=budget_epochs,
                budget_hours=None,
            )
            changes: dict[str, Any] = {"pruner": _pruner_settings(config, strategy.pruner)}
            if strategy.sampler == "grid" and grid is not None:
                changes["grid"] = GridSettings(
                    points=max(len(v) for v in grid.values()),
                    values={name: tuple(v) for name, v in grid.items()},
                )
            runs.append(CompareRun(strategy, k, dataclasses.replace(study, **changes)))
    return runs


@dataclass(frozen=True)
class CompareRequest:
    """What `hpsearch compare` was asked, validated."""

    config_path: str
    config: StudyConfig
    strategies: tuple[Strategy, ...]
    budget: int
    """Trials per study (the grid's, with `budget_epochs`)."""
    repeats: int
    out_dir: Path
    target: float | None
    """The score counted as reached for "epochs to target"; None: the pooled quantile rule."""
    budget_epochs: int | None = None
    """Epochs per study (equal compute), pruned trials' included; None: a budget in trials."""
