"""The study config read from TOML and validated once, here, at the edge, into the typed
settings of `search.study.settings`.

Every problem is reported as one `ConfigError` line that names the key and the value at fault
(``space.lr: log = true needs low > 0, got low = 0``); nothing downstream re-validates.

Example::

    >>> cfg = parse_config({
    ...     "study": {"name": "demo", "n_trials": 4},
    ...     "task": {"name": "digits", "epochs": 3},
    ...     "space": {"lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True}},
    ... })
    >>> cfg.study.sampler, cfg.train.epochs, cfg.space[0].log
    ('tpe', 3, True)
"""

from __future__ import annotations

import difflib
import importlib.util
import math
import tomllib
from dataclasses import MISSING, fields
from decimal import Decimal
from pathlib import Path
from typing import Any

from search.db.storage import mask_url
from search.study.enqueue import EnqueueError, parse_enqueue
from search.study.names import storage_problem
from search.study.settings import (
    DIRECTIONS,
    PRUNERS,
    SAMPLERS,
    WANDB_MODES,
    ConfigError,
    GridSettings,
    MlflowSettings,
    PrunerSettings,
    StudyConfig,
    StudySettings,
    TaskSettings,
    TrackingSettings,
    WandbSettings,
    shown,
)
from search.study.space import (
    CategoricalParam,
    FloatParam,
    IntParam,
    Param,
    Scalar,
)
from trainer.config import OPTIMIZERS, PRECISIONS, SHARDINGS, TrainConfig
from trainer.tasks import BUILTIN_METRICS

__all__ = [
    "check_tracker_installed",
    "load_config",
    "params_from_overrides",
    "parse_config",
    "parse_tracking",
]


def load_config(path: str | Path) -> StudyConfig:
    """Read and validate a study config file; raises ConfigError with one line on any problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config file ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not a text file in UTF-8 (byte {exc.start}: {exc.reason})"
        ) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    try:
        return parse_config(data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def parse_config(data: dict[str, Any]) -> StudyConfig:
    """Validate a parsed TOML document into a StudyConfig."""
    _check_keys("", data, ("study", "pruner", "task", "train", "space", "grid", "tracking"))
    study = _study(_Section("study", data.get("study"), required=True, settings=StudySettings))
    task = _task(_Section("task", data.get("task"), required=True, settings=TaskSettings))
    pruner = _pruner(_Section("pruner", data.get("pruner"), settings=PrunerSettings), task)
    train = _train(_Section("train", data.get("train"), settings=TrainConfig), task, study)
    space = _space(data.get("space", {}))
    grid = _grid(data.get("grid", {}), space)
    tracking = _tracking(_Section("tracking", data.get("tracking")))
    try:
        enqueue = parse_enqueue(data["study"].get("enqueue"), space)
    except EnqueueError as exc:
        raise ConfigError(str(exc)) from None
    config = StudyConfig(
        study=study,
        pruner=pruner,
        task=task,
        train=train,
        space=space,
        grid=grid,
        tracking=tracking,
        enqueue=enqueue,
    )
    if study.sampler == "grid" and (not space or config.grid_size() < 2):
        raise ConfigError(
            "study.sampler: grid needs [space] parameters with at least two grid values in all "
            f"(the grid has {config.grid_size() if space else 0} point(s))"
        )
    if study.sampler == "grid" and study.n_trials is None:
        # A budget without a trial cap: the grid's points are the cap (never a point twice).
        config = config.with_study(n_trials=config.grid_size())
    if study.sampler == "grid" and config.study.max_trials > config.grid_size():
        raise ConfigError(
            f"study.n_trials: {study.n_trials} is more than the grid's {config.grid_size()} points "
            "(sampler = grid would repeat points); lower n_trials or add [grid] points"
        )
    _check_batch_sizes(space, train)
    refused = storage_problem(study.name, study.metric, (p.name for p in space))
    if refused is not None:
        raise ConfigError(refused)
    _check_builtin_metric(study, task)
    return config


def params_from_overrides(space: tuple[Param, ...], overrides: list[str]) -> dict[str, Any]:
    """The middle of each parameter's range, then the ``--set NAME=VALUE`` values (`hpsearch
    try`, `hpsearch estimate`), checked against the space: ConfigError naming the value."""
    params = {p.name: p.center() for p in space}
    by_name = {p.name: p for p in space}
    for text in overrides:
        name, sep, raw = text.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ConfigError(f"--set {text!r}: expected NAME=VALUE, e.g. --set lr=0.003")
        if name not in by_name:
            known = ", ".join(by_name) or "(none)"
            raise ConfigError(f"--set {name}: not a parameter of the config's [space] ({known})")
        param = by_name[name]
        try:
            value = param.parse(raw.strip())
        except ValueError:
            raise ConfigError(
                f"--set {name}={raw}: not a valid value for space.{name} {param.describe()}"
            ) from None
        if not param.contains(value):
            raise ConfigError(f"--set {name}={raw}: outside space.{name} {param.describe()}")
        params[name] = value
    return params


_KIND_NAMES = {
    int: "an integer",
    float: "a number",
    str: "a string",
    bool: "true or false",
    list: "a list",
    dict: "a table",
}


class _Section:
    """Typed reads from one TOML table, with errors that name `section.key`.

    A key that is not in the table takes the default of the same-named field of `settings`,
    the dataclass the section becomes: defaults are written once, there.
    """

    def __init__(
        self, name: str, table: Any, *, required: bool = False, settings: type | None = None
    ) -> None:
        if table is None:
            if required:
                raise ConfigError(f"[{name}] section is missing")
            table = {}
        if not isinstance(table, dict):
            raise ConfigError(f"{name}: must be a table, got {shown(table)}")
        self.name, self.table = name, table
        self.defaults = (
            {f.name: f.default for f in fields(settings) if f.default is not MISSING}
            if settings is not None
            else {}
        )

    def key(self, key: str) -> str:
        return f"{self.name}.{key}"

    def get(
        self,
        key: str,
        kind: type | tuple[type, ...],
        default: Any = ...,
        *,
        choices: tuple[str, ...] | None = None,
    ) -> Any:
        if key not in self.table:
            if default is ...:
                default = self.defaults.get(key, ...)
            if default is ...:
                raise ConfigError(f"{self.key(key)} is missing")
            return default
        value = self.table[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
            names = (
                "a number"
                if float in kinds
                else " or ".join(_KIND_NAMES.get(k, k.__name__) for k in kinds)
            )
            raise ConfigError(f"{self.key(key)}: must be {names}, got {shown(value)}")
        if choices is not None and value not in choices:
            raise ConfigError(
                f"{self.key(key)}: unknown value {shown(value)} (choose from {', '.join(choices)})"
            )
        if float in kinds and isinstance(value, (int, float)) and not math.isfinite(value):
            raise ConfigError(f"{self.key(key)}: must be finite, got {shown(value)}")
        return value

    def positive_int(self, key: str, default: Any = ..., minimum: int = 1) -> int:
        value = self.get(key, int, default)
        if value < minimum:
            raise ConfigError(f"{self.key(key)}: must be >= {minimum}, got {value}")
        return value

    def allow(self, *keys: str) -> None:
        _check_keys(self.name, self.table, keys)


def _study(s: _Section) -> StudySettings:
    s.allow(
        "name",
        "direction",
        "metric",
        "n_trials",
        "budget_epochs",
        "budget_hours",
        "sampler",
        "seed",
        "max_attempts",
        "enqueue",
    )
    name = s.get("name", str)
    if not name.strip():
        raise ConfigError("study.name: must not be empty")
    budget_epochs = s.positive_int("budget_epochs") if "budget_epochs" in s.table else None
    budget_hours = None
    if "budget_hours" in s.table:
        budget_hours = float(s.get("budget_hours", (int, float)))
        if budget_hours <= 0:
            raise ConfigError(f"study.budget_hours: must be > 0, got {budget_hours}")
    has_budget = budget_epochs is not None or budget_hours is not None
    study = StudySettings(
        name=name,
        direction=s.get("direction", str, choices=DIRECTIONS),
        metric=s.get("metric", str),
        n_trials=s.positive_int("n_trials") if "n_trials" in s.table or not has_budget else None,
        budget_epochs=budget_epochs,
        budget_hours=budget_hours,
        sampler=s.get("sampler", str, choices=SAMPLERS),
        seed=s.get("seed", int),
        max_attempts=s.positive_int("max_attempts"),
    )
    if not 0 <= study.seed < 2**32:
        # Grid and QMC hand it to numpy as it is; the others derive 32-bit seeds from it.
        raise ConfigError(f"study.seed: must be in [0, 2**32), got {study.seed}")
    return study


def _task(s: _Section) -> TaskSettings:
    s.allow("name", "epochs")
    name = s.get("name", str)
    if not name.strip():
        raise ConfigError("task.name: must not be empty")
    return TaskSettings(name=name, epochs=s.positive_int("epochs"))


def _pruner(s: _Section, task: TaskSettings) -> PrunerSettings:
    kind = s.get("type", str, choices=PRUNERS)
    if kind == "hyperband":
        s.allow("type", "min_resource", "reduction_factor", "promotion")
    elif kind in ("successive_halving", "asha"):
        s.allow("type", "min_resource", "reduction_factor")
    elif kind == "median":
        s.allow("type", "n_startup_trials", "n_warmup_steps")
    else:
        s.allow("type")
    pruner = PrunerSettings(
        type=kind,
        min_resource=s.positive_int("min_resource"),
        reduction_factor=s.positive_int("reduction_factor", minimum=2),
        n_startup_trials=s.positive_int("n_startup_trials", minimum=0),
        n_warmup_steps=s.positive_int("n_warmup_steps", minimum=0),
        promotion=s.get("promotion", bool),
    )
    if kind in ("hyperband", "successive_halving", "asha") and pruner.min_resource > task.epochs:
        raise ConfigError(
            f"pruner.min_resource: {pruner.min_resource} is more than task.epochs = {task.epochs}"
        )
    return pruner


def _train(s: _Section, task: TaskSettings, study: StudySettings) -> TrainConfig:
    s.allow(
        "precision",
        "grad_accum_steps",
        "grad_checkpointing",
        "checkpoint_every_s",
        "optimizer",
        "deterministic",
        "sharding",
    )
    every = s.get("checkpoint_every_s", (int, float))
    if every <= 0:
        raise ConfigError(f"train.checkpoint_every_s: must be > 0, got {every}")
    return TrainConfig(
        epochs=task.epochs,
        precision=s.get("precision", str, choices=PRECISIONS),
        grad_accum_steps=s.positive_int("grad_accum_steps"),
        grad_checkpointing=s.get("grad_checkpointing", bool),
        checkpoint_every_s=float(every),
        optimizer=s.get("optimizer", str, choices=OPTIMIZERS),
        deterministic=s.get("deterministic", bool),
        sharding=s.get("sharding", str, choices=SHARDINGS),
        seed=study.seed,
    )


def _space(table: Any) -> tuple[Param, ...]:
    if not isinstance(table, dict):
        raise ConfigError(f"space: must be a table, got {shown(table)}")
    return tuple(_param(name, spec) for name, spec in table.items())


def _param(name: str, spec: Any) -> Param:
    s = _Section(f"space.{name}", spec)
    kind = s.get("type", str, choices=("float", "int", "categorical"))
    if kind == "categorical":
        s.allow("type", "choices")
        choices = s.get("choices", list)
        if not choices:
            raise ConfigError(f"space.{name}.choices: must list at least one value")
        for c in choices:
            if not isinstance(c, (bool, int, float, str)):
                raise ConfigError(
                    f"space.{name}.choices: {shown(c)} is not a number, string or boolean"
                )
        if len(set(map(repr, choices))) != len(choices):
            raise ConfigError(f"space.{name}.choices: values repeat in {shown(choices)}")
        return CategoricalParam(name=name, choices=tuple(choices))

    s.allow("type", "low", "high", "log", "step")
    s = _Section(s.name, s.table, settings=IntParam if kind == "int" else FloatParam)
    number = int if kind == "int" else (int, float)
    low, high = s.get("low", number), s.get("high", number)
    log = s.get("log", bool)
    if low >= high:
        raise ConfigError(f"space.{name}: low must be < high, got low = {low}, high = {high}")
    if log and low <= 0:
        raise ConfigError(f"space.{name}: log = true needs low > 0, got low = {low}")
    if kind == "int":
        step = s.get("step", int)
        if step < 1:
            raise ConfigError(f"space.{name}.step: must be >= 1, got {step}")
        if log and step != 1:
            raise ConfigError(f"space.{name}: log = true cannot be combined with step = {step}")
        _check_step_divides(name, low, high, step)
        return IntParam(name=name, low=low, high=high, log=log, step=step)
    step = s.get("step", (int, float))
    if step is not None and step <= 0:
        raise ConfigError(f"space.{name}.step: must be > 0, got {step}")
    if step is not None and log:
        raise ConfigError(f"space.{name}: log = true cannot be combined with step = {step}")
    if step is not None:
        _check_step_divides(name, low, high, step)
    return FloatParam(
        name=name,
        low=float(low),
        high=float(high),
        log=log,
        step=None if step is None else float(step),
    )


def _check_step_divides(name: str, low: float, high: float, step: float) -> None:
    """A step that does not divide high - low would have Optuna lower `high` to the last step
    below it, with a warning nobody sees, and never try the high the config names. Decimal
    arithmetic, as Optuna's own check, so that 0.1 divides 0.5."""
    span = Decimal(str(high)) - Decimal(str(low))
    rest = span % Decimal(str(step))
    if rest != 0:
        last = Decimal(str(high)) - rest
        raise ConfigError(
            f"space.{name}: step = {step} does not divide high - low = {span} (the highest "
            f"value tried would be {last}, not {high}); change high or step"
        )


def _grid(table: Any, space: tuple[Param, ...]) -> GridSettings:
    s = _Section("grid", table, settings=GridSettings)
    names = {p.name: p for p in space}
    points = s.positive_int("points")
    values: dict[str, tuple[Scalar, ...]] = {}
    for key, raw in s.table.items():
        if key == "points":
            continue
        if key not in names:
            raise ConfigError(_unknown("grid", key, ("points", *names)))
        if not isinstance(raw, list) or not raw:
            raise ConfigError(f"grid.{key}: must be a non-empty list of values, got {shown(raw)}")
        param = names[key]
        for v in raw:
            ok = param.contains(v) or (
                isinstance(param, FloatParam) and isinstance(v, int) and param.contains(float(v))
            )
            if not ok:
                raise ConfigError(
                    f"grid.{key}: {shown(v)} is outside space.{key} {param.describe()}"
                )
        values[key] = tuple(float(v) if isinstance(param, FloatParam) else v for v in raw)
    return GridSettings(points=points, values=values)


def parse_tracking(table: Any) -> TrackingSettings:
    """Validate a `[tracking]` table (also what `hpsearch export` builds from its flags)."""
    return _tracking(_Section("tracking", table))


def _tracking(s: _Section) -> TrackingSettings:
    s.allow("mlflow", "wandb")
    mlflow = wandb = None
    if "mlflow" in s.table:
        m = _Section("tracking.mlflow", s.table["mlflow"], settings=MlflowSettings)
        m.allow("uri", "experiment")
        uri = m.get("uri", str).strip()
        if not uri:
            raise ConfigError("tracking.mlflow.uri: must not be empty")
        if mask_url(uri) != uri:
            raise ConfigError(
                f"tracking.mlflow.uri: {mask_url(uri)} holds a password; keep credentials out "
                "of the config: set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, or "
                "MLFLOW_TRACKING_TOKEN, where the workers run"
            )
        experiment = m.get("experiment", str)
        if experiment is not None and not experiment.strip():
            raise ConfigError("tracking.mlflow.experiment: must not be empty")
        check_tracker_installed("mlflow")
        mlflow = MlflowSettings(uri=uri, experiment=experiment)
    if "wandb" in s.table:
        w = _Section("tracking.wandb", s.table["wandb"], settings=WandbSettings)
        w.allow("project", "entity", "mode")
        project = w.get("project", str)
        if not project.strip():
            raise ConfigError("tracking.wandb.project: must not be empty")
        entity = w.get("entity", str)
        if entity is not None and not entity.strip():
            raise ConfigError("tracking.wandb.entity: must not be empty")
        mode = w.get("mode", str, choices=WANDB_MODES)
        check_tracker_installed("wandb")
        wandb = WandbSettings(project=project, entity=entity, mode=mode)
    return TrackingSettings(mlflow=mlflow, wandb=wandb)


def check_tracker_installed(tracker: str) -> None:
    """ConfigError naming the extra to install when `tracker` (mlflow | wandb) is missing."""
    try:
        found = importlib.util.find_spec(tracker) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ConfigError(
            f"tracking.{tracker}: the {tracker} package is not installed here: "
            f"pip install 'hpsearch[{tracker}]'"
        )


def _check_builtin_metric(study: StudySettings, task: TaskSettings) -> None:
    """A built-in task computes one score: a study of it must name that score and improve it
    the way it improves (else `metric = "val_loss"` with `direction = "minimize"` would search
    for the least accurate model, under the loss's name)."""
    if task.name not in BUILTIN_METRICS:
        return
    metric, direction = BUILTIN_METRICS[task.name]
    if study.metric != metric:
        raise ConfigError(
            f"study.metric: the built-in task {task.name!r} reports {metric!r}, got "
            f"{study.metric!r} (for another score, write your own task: task.name = "
            "'package.module:function')"
        )
    if study.direction != direction:
        raise ConfigError(
            f"study.direction: {metric!r} of the built-in task {task.name!r} is better when "
            f"{'higher' if direction == 'maximize' else 'lower'}: direction = {direction!r}, "
            f"got {study.direction!r}"
        )


def _check_batch_sizes(space: tuple[Param, ...], train: TrainConfig) -> None:
    for p in space:
        if p.name != "batch_size":
            continue
        if isinstance(p, FloatParam):
            raise ConfigError(
                "space.batch_size: must be an int or categorical parameter, not float"
            )
        sizes = p.choices if isinstance(p, CategoricalParam) else (p.low,)
        for b in sizes:
            if not isinstance(b, int) or isinstance(b, bool) or b < train.grad_accum_steps:
                raise ConfigError(
                    f"space.batch_size: {shown(b)} cannot be split into "
                    f"train.grad_accum_steps = {train.grad_accum_steps} micro-batches"
                )


def _check_keys(section: str, table: dict[str, Any], allowed: tuple[str, ...]) -> None:
    for key in table:
        if key not in allowed:
            raise ConfigError(_unknown(section, key, allowed))


def _unknown(section: str, key: str, allowed: tuple[str, ...]) -> str:
    where = f"{section}.{key}" if section else f"[{key}]"
    hint = difflib.get_close_matches(key, allowed, n=1)
    suggestion = f" (did you mean '{hint[0]}'?)" if hint else f" (allowed: {', '.join(allowed)})"
    return f"unknown key {where}{suggestion}"
