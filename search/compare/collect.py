"""What a comparison's report is computed from: every study's finished trials, read through
Optuna from the storage (`collect`)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import TrialState

from search.compare.plan import CompareRun
from search.db.storage import Storage
from search.study.studies import StudyRef

__all__ = ["RunResult", "TrialPoint", "collect"]


@dataclass
class TrialPoint:
    """A finished trial, as the report needs it."""

    number: int
    state: str
    value: float | None
    params: dict[str, Any]
    epochs: int
    """Epochs trained: the trial's validation reports (one per epoch)."""


@dataclass
class RunResult:
    """One study of the comparison, its finished trials in the order they finished."""

    name: str
    label: str
    repeat: int
    seed: int
    maximize: bool
    trials: list[TrialPoint] = field(default_factory=list)

    def better(self, a: float, b: float) -> bool:
        return a > b if self.maximize else a < b

    def best_so_far(self) -> list[float | None]:
        """After each finished trial: the best COMPLETE value so far (None before the first)."""
        out: list[float | None] = []
        best: float | None = None
        for t in self.trials:
            complete = t.state == "COMPLETE" and t.value is not None
            if complete and (best is None or self.better(t.value, best)):  # type: ignore[arg-type]
                best = t.value
            out.append(best)
        return out

    @property
    def best(self) -> float | None:
        so_far = self.best_so_far()
        return so_far[-1] if so_far else None

    def cumulative_epochs(self) -> list[int]:
        return list(itertools.accumulate(t.epochs for t in self.trials))

    @property
    def epochs(self) -> int:
        return sum(t.epochs for t in self.trials)

    def epochs_to(self, target: float) -> int | None:
        """Epochs trained by all trials finished up to the first COMPLETE one that reached
        `target` (that trial included); None if none did."""
        for best, spent in zip(self.best_so_far(), self.cumulative_epochs(), strict=True):
            if best is not None and not self.better(target, best):
                return spent
        return None

    def distinct(self, param: str) -> int:
        return len({repr(t.params[param]) for t in self.trials if param in t.params})


def collect(
    storage: Storage, runs: Sequence[CompareRun], refs: Sequence[StudyRef]
) -> list[RunResult]:
    """Every study's finished trials, read through Optuna from the storage."""
    results = []
    for run, ref in zip(runs, refs, strict=True):
        study = optuna.load_study(study_name=ref.name, storage=storage.optuna_storage())
        finished = study.get_trials(
            deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
        )
        finished.sort(key=lambda t: (t.datetime_complete or t.datetime_start, t.number))
        results.append(
            RunResult(
                name=ref.name,
                label=run.strategy.label,
                repeat=run.repeat,
                seed=run.seed,
                maximize=run.config.study.direction == "maximize",
                trials=[
                    TrialPoint(
                        number=t.number,
                        state=t.state.name,
                        value=t.value if t.state != TrialState.FAIL else None,
                        params=dict(t.params),
                        epochs=len(t.intermediate_values),
                    )
                    for t in finished
                ],
            )
        )
    return results
