"""YAHPO Gym's LCBench surrogate as a training task: a configuration's learning curve and runtime.

LCBench (Zimmer et al. 2021) holds learning curves of MLPs on 34 OpenML tasks; YAHPO Gym
(Pfisterer et al. 2022, Apache 2.0) fits a surrogate to them, read here with `yahpo-gym==1.0.2`
(`pip install -e '.[bench]'`) from the data of tag v1.0.2 of slds-lmu/yahpo_data (`lcbench/`).

YAHPO's fidelity `epoch` runs 1..52, and epoch 1 is the untrained model (YAHPO's FAQ): trained
epoch e (1..50) is YAHPO epoch e + 1. `time` is the cumulative runtime the surrogate predicts, so
trained epoch e lasts time(e + 1) - time(e) seconds (at least 1 ms: the surrogate is not exactly
monotone). One whole curve (50 epochs) is one batched call of the surrogate, ~5 ms, cached per
configuration.

Example::

    lc = LCBench("189906", data_dir)
    curve = lc.curve({"batch_size": 64, "learning_rate": 1e-3, ...})
    curve.accuracy[0], curve.seconds[0]            # trained epoch 1: val accuracy (%), seconds
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["EPOCHS", "METRICS", "SPACE", "Curve", "LCBench", "default_data_dir"]

EPOCHS = 50
"""Trained epochs of an LCBench run (YAHPO epochs 2..51)."""

METRICS = {"val_accuracy": 1.0, "val_balanced_accuracy": 1.0, "val_cross_entropy": -1.0}
"""YAHPO LCBench's validation metrics and their sign as a score (higher is better): a curve of
val_cross_entropy holds its values negated, so every study here maximizes."""

SPACE: dict[str, dict[str, Any]] = {
    "batch_size": {"type": "int", "low": 16, "high": 512, "log": True},
    "learning_rate": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
    "max_dropout": {"type": "float", "low": 0.0, "high": 1.0},
    "max_units": {"type": "int", "low": 64, "high": 1024, "log": True},
    "momentum": {"type": "float", "low": 0.1, "high": 0.99},
    "num_layers": {"type": "int", "low": 1, "high": 5},
    "weight_decay": {"type": "float", "low": 1e-5, "high": 1e-1},
}
"""LCBench's search space (YAHPO's config_space.json without the task id and the fidelity), as
an hpsearch `[space]` table."""


def default_data_dir() -> Path:
    """`$YAHPO_DATA`, else `../shared/bench-data/yahpo_data` next to the repository."""
    env = os.environ.get("YAHPO_DATA")
    if env:
        return Path(env)
    repo = Path(__file__).resolve().parents[2]
    return repo.parent / "shared" / "bench-data" / "yahpo_data"


@dataclass(frozen=True)
class Curve:
    """One configuration's learning curve: per trained epoch (index e - 1), the validation
    score (accuracy in percent by default; see `METRICS`) and the epoch's runtime in seconds."""

    accuracy: tuple[float, ...]
    seconds: tuple[float, ...]


class LCBench:
    """The surrogate of one LCBench instance (an OpenML task id)."""

    def __init__(
        self,
        instance: str,
        data_dir: str | os.PathLike[str] | None = None,
        metric: str = "val_accuracy",
    ) -> None:
        import contextlib
        import io

        data = Path(data_dir) if data_dir is not None else default_data_dir()
        if not (data / "lcbench" / "model.onnx").is_file():
            raise FileNotFoundError(f"no LCBench surrogate in {data} (lcbench/model.onnx)")
        if metric not in METRICS:
            raise ValueError(f"unknown LCBench metric {metric!r}: one of {', '.join(METRICS)}")
        import yahpo_gym

        # Set in memory, not written to ~/.config/yahpo_gym.
        yahpo_gym.local_config._config = {"data_path": str(data)}
        with contextlib.redirect_stdout(io.StringIO()):  # it prints its citations
            self._bench = yahpo_gym.BenchmarkSet("lcbench", multithread=False)
        if str(instance) not in self._bench.instances:
            raise ValueError(f"unknown LCBench instance {instance!r}")
        self._bench.set_instance(str(instance))
        self.instance = str(instance)
        self.metric = metric
        self._cache: dict[tuple[Any, ...], Curve] = {}

    def curve(self, params: dict[str, Any]) -> Curve:
        key = tuple(params[name] for name in SPACE)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        config = {name: params[name] for name in SPACE}
        config["batch_size"] = int(config["batch_size"])
        config["max_units"] = int(config["max_units"])
        config["num_layers"] = int(config["num_layers"])
        config["OpenML_task_id"] = self.instance
        rows = self._bench.objective_function(
            [{**config, "epoch": e} for e in range(1, EPOCHS + 2)]
        )
        times = [float(r["time"]) for r in rows]
        curve = Curve(
            accuracy=tuple(METRICS[self.metric] * float(r[self.metric]) for r in rows[1:]),
            seconds=tuple(max(1e-3, times[e] - times[e - 1]) for e in range(1, EPOCHS + 1)),
        )
        self._cache[key] = curve
        return curve
