"""Pruners: the study config's `[pruner]` made into an Optuna pruner.

Hyperband gets `max_resource = task.epochs` explicitly: Optuna's "auto" infers it from the first
finished trial, which differs between processes and makes workers disagree about brackets.

Example::

    >>> from search.config import PrunerSettings
    >>> rung_steps(PrunerSettings(type="hyperband", min_resource=1, reduction_factor=3), 27)
    [1, 3, 9, 27]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import optuna

if TYPE_CHECKING:
    from search.config import PrunerSettings, StudyConfig

__all__ = ["make_pruner", "rung_steps"]


def make_pruner(config: StudyConfig) -> optuna.pruners.BasePruner:
    p = config.pruner
    if p.type == "hyperband":
        return optuna.pruners.HyperbandPruner(
            min_resource=p.min_resource,
            max_resource=config.task.epochs,
            reduction_factor=p.reduction_factor,
        )
    if p.type == "successive_halving":
        return optuna.pruners.SuccessiveHalvingPruner(
            min_resource=p.min_resource, reduction_factor=p.reduction_factor
        )
    if p.type == "median":
        return optuna.pruners.MedianPruner(
            n_startup_trials=p.n_startup_trials, n_warmup_steps=p.n_warmup_steps
        )
    return optuna.pruners.NopPruner()


def rung_steps(pruner: PrunerSettings, epochs: int) -> list[int] | None:
    """Epochs at which the pruner can stop a trial; None: at any epoch.

    Successive halving (and each Hyperband bracket) only decides at rungs,
    min_resource * reduction_factor**k; at other epochs a report needs no pruning query.
    """
    if pruner.type == "none":
        return []
    if pruner.type == "median":
        return None
    steps, step = [], pruner.min_resource
    while step <= epochs:
        steps.append(step)
        step *= pruner.reduction_factor
    return steps
