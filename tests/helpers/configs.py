"""Study configs for the tests: `GOOD` (every section, to vary one key at a time), `SMALL` (a
study that runs in seconds, as a TOML file), `ASHA_STUDY` (an ASHA study with an epoch budget,
as a TOML file), `make_config` (a parsed one on a synthetic space), `pruner_config` (a parsed one
on one float, its pruner given, `ASHA_PRUNER` for one), `tpe_config` and `hedge_config` (parsed
TPE studies)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from search.study.parse_config import parse_config

GOOD: dict[str, Any] = {
    "study": {"name": "demo", "direction": "maximize", "n_trials": 6, "sampler": "tpe", "seed": 3},
    "pruner": {"type": "hyperband", "min_resource": 1, "reduction_factor": 3},
    "task": {"name": "digits", "epochs": 9},
    "train": {"precision": "auto", "grad_accum_steps": 2, "checkpoint_every_s": 60},
    "space": {
        "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
        "batch_size": {"type": "categorical", "choices": [32, 64, 128]},
        "width": {"type": "int", "low": 8, "high": 64, "log": True},
        "dropout": {"type": "float", "low": 0.0, "high": 0.5},
    },
    "grid": {"points": 3},
}


SMALL = """
[study]
name = "{name}"
direction = "maximize"
n_trials = {n_trials}
sampler = "random"
seed = 1

[pruner]
type = "hyperband"
min_resource = 1
reduction_factor = 2

[task]
name = "{task}"
epochs = 4

[train]
checkpoint_every_s = 60

[space]
lr = {{ type = "float", low = 1e-4, high = 3e-1, log = true }}
width = {{ type = "int", low = 4, high = 24, log = true }}
batch_size = {{ type = "categorical", choices = [64, 128] }}
"""


ASHA_STUDY = """
[study]
name = "{name}"
direction = "{direction}"
metric = "val_accuracy"
budget_epochs = 30
sampler = "random"
seed = 3

[pruner]
type = "asha"
min_resource = 1
reduction_factor = 3

[task]
name = "tests.helpers.tiny_task:make_task"
epochs = 9

[space]
lr = {{ type = "float", low = 1e-4, high = 3e-1, log = true }}
dropout = {{ type = "float", low = 0.0, high = 0.5 }}
act = {{ type = "categorical", choices = ["relu", "tanh"] }}
"""

ASHA_PRUNER = {"type": "asha", "min_resource": 1, "reduction_factor": 3}


def write_config(tmp_path: Path, name: str, n_trials: int = 10, task: str = "digits") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(SMALL.format(name=name, n_trials=n_trials, task=task))
    return path


def make_config(name: str, **study: Any) -> Any:
    return parse_config(
        {
            "study": {"name": name, "n_trials": 12, "sampler": "random", **study},
            "pruner": {"type": "hyperband", "min_resource": 1, "reduction_factor": 3},
            "task": {"name": "digits", "epochs": 9},
            "space": {
                "x": {"type": "float", "low": 0.0, "high": 1.0},
                "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
                "width": {"type": "categorical", "choices": [8, 16, 32]},
            },
        }
    )


def pruner_config(name: str, pruner: dict[str, Any], **study: Any) -> Any:
    """A random-search study of 9-epoch trials on one float `x`, with `pruner`."""
    return parse_config(
        {
            "study": {"name": name, "sampler": "random"} | study,
            "pruner": pruner,
            "task": {"name": "digits", "epochs": 9},
            "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
        }
    )


def tpe_config(name: str, n_trials: int) -> Any:
    """A TPE + Hyperband study of 9-epoch trials on four params of every kind."""
    return parse_config(
        {
            "study": {"name": name, "n_trials": n_trials, "sampler": "tpe", "seed": 3},
            "pruner": {"type": "hyperband", "min_resource": 1, "reduction_factor": 3},
            "task": {"name": "digits", "epochs": 9},
            "space": {
                "x": {"type": "float", "low": 0.0, "high": 1.0},
                "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
                "width": {"type": "int", "low": 8, "high": 64, "log": True},
                "act": {"type": "categorical", "choices": ["relu", "gelu"]},
            },
        }
    )


def hedge_config(
    name: str,
    *,
    sampler: str = "tpe",
    pruner: str = "asha",
    epochs: int = 28,
    n_trials: int = 30,
    enqueue: list[dict[str, float]] | None = None,
) -> Any:
    """A TPE + ASHA study (by default) of 28-epoch trials on two floats: one that hedges."""
    study = {"name": name, "sampler": sampler, "seed": 3, "n_trials": n_trials}
    return parse_config(
        {
            "study": {**study, **({"enqueue": enqueue} if enqueue else {})},
            "pruner": {"type": pruner, "min_resource": 1, "reduction_factor": 3},
            "task": {"name": "digits", "epochs": epochs},
            "space": {
                "x": {"type": "float", "low": 0.0, "high": 1.0},
                "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
            },
        }
    )
