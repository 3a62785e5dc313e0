"""Pruners: the study config's `[pruner]` made into an Optuna pruner.

Hyperband gets `max_resource = task.epochs` explicitly: Optuna's "auto" infers it from the first
finished trial, which differs between processes and makes workers disagree about brackets.

Example::

    >>> from search.study.settings import PrunerSettings
    >>> rung_steps(PrunerSettings(type="hyperband", min_resource=1, reduction_factor=3), 27)
    [1, 3, 9]
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import optuna

from search.pruning.promotion import Rungs
from search.study.settings import PrunerSettings, StudyConfig

__all__ = ["HyperbandPruner", "make_pruner", "rung_steps"]


class HyperbandPruner(optuna.pruners.HyperbandPruner):
    """Optuna's Hyperband, remembering each trial's bracket.

    At every decision Optuna recomputes the bracket of every trial of the study (a hash of the
    study name and the trial number) to find the bracket's trials: O(n_trials) hashes per
    decision, a tenth of a worker's CPU with 32 workers. A trial's bracket never changes. (If
    Optuna renames the private method, this override only stops saving time.)
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._brackets: dict[tuple[str, int], int] = {}

    def _get_bracket_id(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> int:
        return self.bracket_of(study, trial.number)

    def bracket_of(self, study: optuna.Study, number: int) -> int:
        """The bracket of trial `number` (Optuna's: a hash of the study name and the number)."""
        key = (study.study_name, number)
        bracket = self._brackets.get(key)
        if bracket is None:
            if not self._pruners:
                self._try_initialization(study)  # max_resource is set: reads no trials
            trial = SimpleNamespace(number=number)  # all Optuna's computation reads
            bracket = self._brackets[key] = super()._get_bracket_id(study, trial)  # type: ignore[arg-type]
        return bracket

    def halving_pruner(
        self, study: optuna.Study, number: int
    ) -> optuna.pruners.SuccessiveHalvingPruner:
        """The successive halving pruner of trial `number`'s bracket."""
        return self._pruners[self.bracket_of(study, number)]


def make_pruner(config: StudyConfig) -> optuna.pruners.BasePruner:
    p = config.pruner
    if p.type == "hyperband":
        return HyperbandPruner(
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
    min_resource * reduction_factor**k; at other epochs a report needs no pruning query. The
    rungs are `Rungs.levels`, the promoter's: below `epochs` (a trial that reaches it has
    completed; the worker asks no pruner there).
    """
    if pruner.type == "none" or pruner.pauses:
        return []  # promotion-based ASHA pauses instead (search.worker.budget_and_promotion)
    if pruner.type == "median":
        return None
    return Rungs(pruner.min_resource, pruner.reduction_factor, epochs).levels(0)
