"""YAHPO Gym's LCBench surrogate as a training task: a configuration's learning curve and runtime.

LCBench (Zimmer et al. 2021) holds learning curves of MLPs on 34 OpenML tasks; YAHPO Gym
(Pfisterer et al. 2022, Apache 2.0) fits a surrogate to them, read here with `yahpo-gym==1.0.2`
(`pip install -e '.[bench]'`) from the data of tag v1.0.2 of slds-lmu/yahpo_data (`lcbench/`).

YAHPO's fidelity `epoch` runs 1..52, and epoch 1 is the untrained model (YAHPO's FAQ): trained
epoch e (1..50) is YAHPO epoch e + 1. `time` is the cumulative runtime the surrogate predicts, so
trained epoch e lasts time(e + 1) - time(e) seconds (at least 1 ms: the surrogate is not exactly
monotone). One whole curve (51 YAHPO epochs) is one batched call of the surrogate's ONNX model,
cached per configuration; the model's input rows are made from one row converted by YAHPO (its
`_config_to_xs`, row by row in Python, was most of a curve's cost) with the epoch column set,
the very arrays YAHPO's `objective_function` would build, so the outputs are its outputs.

The metric is one of YAHPO's outputs for LCBench (`METRICS`): `val_accuracy` (the default, in
percent), `val_balanced_accuracy` (a fraction) or `val_cross_entropy` (minimised). A curve holds
the metric's values as the surrogate gives them (`values`) and the same numbers signed so that
higher is better (`score`: the cross-entropy negated), which is what the in-process strategies
maximise.

Example::

    lc = LCBench("189906", data_dir)
    curve = lc.curve({"batch_size": 64, "learning_rate": 1e-3, ...})
    curve.values[0], curve.seconds[0]              # trained epoch 1: val accuracy (%), seconds
    LCBench("189906", data_dir, metric="val_cross_entropy").curve(...).score  # -cross-entropy
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["EPOCHS", "METRICS", "SPACE", "Curve", "LCBench", "default_data_dir"]

EPOCHS = 50
"""Trained epochs of an LCBench run (YAHPO epochs 2..51)."""

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


METRICS: dict[str, bool] = {
    "val_accuracy": True,
    "val_balanced_accuracy": True,
    "val_cross_entropy": False,
}
"""YAHPO's LCBench validation outputs a benchmark can score by: name -> maximised."""


def default_data_dir() -> Path:
    """`$YAHPO_DATA`, else `shared/bench-data/yahpo_data` in the repository's parent folder (or
    its grandparent's, for a git worktree one folder deeper)."""
    env = os.environ.get("YAHPO_DATA")
    if env:
        return Path(env)
    repo = Path(__file__).resolve().parents[2]
    ups = (repo.parent, repo.parent.parent)
    candidates = [up / "shared" / "bench-data" / "yahpo_data" for up in ups]
    return next((c for c in candidates if (c / "lcbench").is_dir()), candidates[0])


@dataclass(frozen=True)
class Curve:
    """One configuration's learning curve: per trained epoch (index e - 1), the metric's value
    as the surrogate gives it and the epoch's runtime in seconds; `maximize` says which way is
    better."""

    values: tuple[float, ...]
    seconds: tuple[float, ...]
    maximize: bool = True

    @property
    def score(self) -> tuple[float, ...]:
        """The values signed so that higher is better (a minimised metric negated)."""
        return self.values if self.maximize else tuple(-v for v in self.values)

    @property
    def accuracy(self) -> tuple[float, ...]:
        """`score`, under the name simulate.py's strategies read (they maximise it)."""
        return self.score


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
            raise ValueError(f"unknown LCBench metric {metric!r} (one of {', '.join(METRICS)})")
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
        self.maximize = METRICS[metric]
        self._cache: dict[tuple[Any, ...], Curve] = {}
        cont = list(self._bench.config.cont_names)
        self._epoch_column: int | None = cont.index("epoch") if "epoch" in cont else None
        """Where YAHPO's model reads the epoch (None: not a column of its own: every row goes
        through YAHPO's conversion)."""

    def curve(self, params: dict[str, Any]) -> Curve:
        """The configuration's curve: one batched surrogate call over its epochs, cached."""
        key = tuple(params[name] for name in SPACE)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        config = {name: params[name] for name in SPACE}
        config["batch_size"] = int(config["batch_size"])
        config["max_units"] = int(config["max_units"])
        config["num_layers"] = int(config["num_layers"])
        config["OpenML_task_id"] = self.instance
        rows = self._epochs(config, range(1, EPOCHS + 2))
        times = [float(r["time"]) for r in rows]
        curve = Curve(
            values=tuple(float(r[self.metric]) for r in rows[1:]),
            seconds=tuple(max(1e-3, times[e] - times[e - 1]) for e in range(1, EPOCHS + 1)),
            maximize=self.maximize,
        )
        self._cache[key] = curve
        return curve

    def _epochs(self, config: dict[str, Any], epochs: range) -> list[dict[str, Any]]:
        """`self._bench.objective_function([{**config, "epoch": e} for e in epochs])`, with
        YAHPO's conversion of a configuration to the model's inputs done once, not per epoch:
        the rows differ only in the epoch column, which is set here (small integers, exact in
        float32). The same arrays go to the same ONNX session: the same outputs."""
        import numpy as np

        bench = self._bench
        if self._epoch_column is None:
            return list(bench.objective_function([{**config, "epoch": e} for e in epochs]))
        if not bench.active_session or bench.session is None:
            bench.set_session(multithread=False)
        x_cont, x_cat = bench._config_to_xs({**config, "epoch": epochs[0]})
        x_cont = np.repeat(x_cont, len(epochs), axis=0)
        x_cont[:, self._epoch_column] = np.asarray(list(epochs), dtype=np.float64).astype(
            np.float32
        )
        x_cat = np.repeat(x_cat, len(epochs), axis=0)
        inputs = [x.name for x in bench.session.get_inputs()]
        output = bench.session.get_outputs()[0].name
        results = bench.session.run([output], {inputs[0]: x_cat, inputs[1]: x_cont})[0]
        if not bench.active_session:
            bench.session = None
        return [dict(zip(bench.config.y_names, row, strict=True)) for row in results]

    def scores_at(self, many: list[dict[str, Any]], epoch: int) -> list[float]:
        """Each configuration's `score` at trained epoch `epoch` alone, in one batched surrogate
        call (a successive-halving rung's worth): ~40 times cheaper than their whole curves,
        and the same values as their `curve`'s score at that epoch."""
        if not 1 <= epoch <= EPOCHS:
            raise ValueError(f"epoch must be 1..{EPOCHS}, got {epoch}")
        rows = []
        for params in many:
            config = {name: params[name] for name in SPACE}
            config["batch_size"] = int(config["batch_size"])
            config["max_units"] = int(config["max_units"])
            config["num_layers"] = int(config["num_layers"])
            config["OpenML_task_id"] = self.instance
            rows.append({**config, "epoch": epoch + 1})
        out = self._bench.objective_function(rows) if rows else []
        sign = 1.0 if self.maximize else -1.0
        return [sign * float(r[self.metric]) for r in out]
