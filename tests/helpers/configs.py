"""Study configs for the tests: `GOOD` (every section, to vary one key at a time), `SMALL` (a
study that runs in seconds, as a TOML file), `make_config` (a parsed one on a synthetic space)."""

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
