"""The study config's types: one frozen dataclass per section, with its defaults and units, and
`StudyConfig`, the whole config as a study stores it. Parsed and validated once, at the edge, by
`search.study.parse_config`; nothing downstream re-validates.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from search.study.space import (
    Param,
    Scalar,
    param_from_dict,
    param_to_dict,
)
from trainer.config import TrainConfig

__all__ = [
    "DIRECTIONS",
    "PRUNERS",
    "SAMPLERS",
    "UNLIMITED_TRIALS",
    "WANDB_MODES",
    "ConfigError",
    "GridSettings",
    "MlflowSettings",
    "PrunerSettings",
    "StudyConfig",
    "StudySettings",
    "TaskSettings",
    "TrackingSettings",
    "WandbSettings",
]

UNLIMITED_TRIALS = 2**31 - 1
"""`StudySettings.max_trials` when n_trials is left out: the budget ends the study first."""

SAMPLERS = ("random", "tpe", "grid", "qmc", "cmaes", "gp")
PRUNERS = ("hyperband", "successive_halving", "asha", "median", "none")
DIRECTIONS = ("maximize", "minimize")
WANDB_MODES = ("online", "offline")


class ConfigError(ValueError):
    """A bad study config: the message is one line naming the key and value at fault."""


@dataclass(frozen=True, kw_only=True)
class StudySettings:
    """`[study]`: what is searched for and how many trials."""

    name: str
    """Study name in the storage; workers join by this name."""
    direction: str = "maximize"
    """maximize | minimize the metric."""
    metric: str = "val_accuracy"
    """Name of the validation score the task's metric_fn computes, reported every epoch."""
    n_trials: int | None = 30
    """Trials to start across all workers (each then finishes: COMPLETE, PRUNED or FAIL); the
    study ends once they have. None (left out of the config, allowed only with a budget): no
    cap; the budget ends the study."""
    budget_epochs: int | None = None
    """Epochs trained by all workers together, never exceeded (repeats after a crash count);
    the study ends when they are spent (`search.db.budget`)."""
    budget_hours: float | None = None
    """Wall-clock hours since the study's first trial started; checked at every claim and
    report, after which running trials end PRUNED with their last value."""
    sampler: str = "tpe"
    """random | tpe | grid | qmc | cmaes | gp."""
    seed: int = 0
    """Seeds the sampler and every trial's training: each trial's seeds are derived from
    (seed, trial number) (`search.sampling.samplers.derived_seed`). Grid and QMC use it as it is: it
    must lie in [0, 2**32)."""
    max_attempts: int = 3
    """A trial whose worker died (or was declared dead, or lost its device) this many times
    ends FAIL with the reason; SIGTERM and Ctrl-C hand-backs do not count."""

    @property
    def max_trials(self) -> int:
        """`n_trials`, or no practical cap when it is left out (a budget ends the study)."""
        return UNLIMITED_TRIALS if self.n_trials is None else self.n_trials

    @property
    def has_budget(self) -> bool:
        return self.budget_epochs is not None or self.budget_hours is not None


@dataclass(frozen=True, kw_only=True)
class PrunerSettings:
    """`[pruner]`: when a trial is stopped early for a poor intermediate score."""

    type: str = "hyperband"
    """hyperband | successive_halving | asha | median | none. asha: promotion-based
    asynchronous successive halving (a trial pauses at each rung and is resumed only when it
    ranks in the top 1/reduction_factor of its rung, `search.pruning.promotion`)."""
    promotion: bool = False
    """hyperband: pause and promote (several brackets of promotion-based ASHA) instead of
    Optuna's stop-only Hyperband. Always true for asha."""
    min_resource: int = 1
    """Epochs before the first rung (hyperband, successive_halving); max_resource is task.epochs."""
    reduction_factor: int = 3
    """1/reduction_factor of the trials are promoted at each rung."""

    @property
    def pauses(self) -> bool:
        """Whether trials pause at rungs and are promoted (asha, hyperband with promotion)."""
        return self.type == "asha" or (self.type == "hyperband" and self.promotion)

    n_startup_trials: int = 5
    """median: trials finished before any is pruned."""
    n_warmup_steps: int = 0
    """median: epochs of a trial before it can be pruned."""


@dataclass(frozen=True, kw_only=True)
class TaskSettings:
    """`[task]`: what is trained."""

    name: str
    """A built-in task ("digits") or "package.module:function" returning trainer.Task."""
    epochs: int = 10
    """Epochs per trial: one validation report each."""


@dataclass(frozen=True, kw_only=True)
class GridSettings:
    """`[grid]`: the grid for sampler = "grid" (and for `compare`)."""

    points: int = 3
    """Values per numeric parameter: evenly spaced, log-spaced where log = true."""
    values: dict[str, tuple[Scalar, ...]] = field(default_factory=dict)
    """Explicit values for some parameters (override `points`)."""


@dataclass(frozen=True, kw_only=True)
class MlflowSettings:
    """`[tracking] mlflow = {...}`: each trial is one MLflow run, the study their parent run."""

    uri: str
    """Tracking server URI (http://host:5000, or any URI MLflow accepts). Never a password:
    MLflow reads MLFLOW_TRACKING_TOKEN or MLFLOW_TRACKING_USERNAME/PASSWORD itself."""
    experiment: str | None = None
    """MLflow experiment the runs go to (created if missing); default: the study name."""


@dataclass(frozen=True, kw_only=True)
class WandbSettings:
    """`[tracking] wandb = {...}`: each trial is one W&B run, grouped by study."""

    project: str
    """W&B project."""
    entity: str | None = None
    """W&B team or user; default: the API key's default entity."""
    mode: str = "online"
    """online | offline (offline runs are written under $WANDB_DIR for `wandb sync`)."""


@dataclass(frozen=True, kw_only=True)
class TrackingSettings:
    """`[tracking]`: the experiment trackers every trial is written to (optional)."""

    mlflow: MlflowSettings | None = None
    wandb: WandbSettings | None = None

    def __bool__(self) -> bool:
        return self.mlflow is not None or self.wandb is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            name: {k: v for k, v in asdict(settings).items() if v is not None}
            for name, settings in (("mlflow", self.mlflow), ("wandb", self.wandb))
            if settings is not None
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrackingSettings:
        mlflow, wandb = data.get("mlflow"), data.get("wandb")
        return cls(
            mlflow=MlflowSettings(**mlflow) if mlflow is not None else None,
            wandb=WandbSettings(**wandb) if wandb is not None else None,
        )


@dataclass(frozen=True, kw_only=True)
class StudyConfig:
    """A whole study config, as stored in the study so that workers need only its name."""

    study: StudySettings
    pruner: PrunerSettings
    task: TaskSettings
    train: TrainConfig
    space: tuple[Param, ...]
    grid: GridSettings
    tracking: TrackingSettings = field(default_factory=TrackingSettings)
    enqueue: tuple[dict[str, Any], ...] = ()
    """`[[study.enqueue]]`: configurations run first, exactly once (`search.study.enqueue`)."""

    def param(self, name: str) -> Param:
        for p in self.space:
            if p.name == name:
                return p
        raise KeyError(name)

    def grid_values(self) -> dict[str, list[Scalar]]:
        """The values the grid sampler visits, per parameter."""
        return {
            p.name: list(self.grid.values[p.name])
            if p.name in self.grid.values
            else p.grid_values(self.grid.points)
            for p in self.space
        }

    def grid_size(self) -> int:
        return math.prod(len(v) for v in self.grid_values().values())

    def with_study(self, **changes: Any) -> StudyConfig:
        """A copy with `[study]` fields changed (compare runs one study per sampler and repeat)."""
        study = replace(self.study, **changes)
        train = replace(self.train, seed=study.seed)
        return replace(self, study=study, train=train)

    def to_dict(self) -> dict[str, Any]:
        """Canonical JSON-friendly form (every default filled in): what `create` stores."""
        return {
            "study": asdict(self.study),
            "pruner": asdict(self.pruner),
            "task": asdict(self.task),
            "train": {k: v for k, v in asdict(self.train).items() if k not in ("epochs", "seed")},
            "space": {p.name: param_to_dict(p) for p in self.space},
            "grid": {
                "points": self.grid.points,
                **{k: list(v) for k, v in self.grid.values.items()},
            },
            # Only when set: the stored config of a study without trackers is as it was.
            **({"tracking": self.tracking.to_dict()} if self.tracking else {}),
            **({"enqueue": [dict(e) for e in self.enqueue]} if self.enqueue else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StudyConfig:
        """Rebuild from `to_dict()` output (trusted: it was validated when stored)."""
        study = StudySettings(**data["study"])
        task = TaskSettings(**data["task"])
        grid = dict(data["grid"])
        points = grid.pop("points")
        return cls(
            study=study,
            pruner=PrunerSettings(**data["pruner"]),
            task=task,
            train=TrainConfig(epochs=task.epochs, seed=study.seed, **data["train"]),
            space=tuple(param_from_dict(n, s) for n, s in data["space"].items()),
            grid=GridSettings(points=points, values={k: tuple(v) for k, v in grid.items()}),
            tracking=TrackingSettings.from_dict(data.get("tracking", {})),
            enqueue=tuple(data.get("enqueue", ())),
        )

    def difference(self, other: StudyConfig) -> str | None:
        """The first key whose value differs from `other`'s, as 'key: a -> b', or None."""
        a, b = _flatten(self.to_dict()), _flatten(other.to_dict())
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                return f"{key}: {shown(a.get(key))} -> {shown(b.get(key))}"
        return None


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def shown(value: Any) -> str:
    """A value as a config error shows it: JSON, a float in short form, None as '(none)'."""
    return (
        "(none)"
        if value is None
        else json.dumps(value)
        if not isinstance(value, float)
        else f"{value:g}"
    )
