"""SMAC3's multi-fidelity optimiser as a peer of bench/efficiency/runner.py (``smac-mf``).

SMAC3 2.4.1's `MultiFidelityFacade` (a random forest and Hyperband, eta 3) as shipped, with the
budget in epochs (min 1, max `EPOCHS`), driven by ask and tell so that the study stops at the
epoch budget. SMAC needs ConfigSpace >= 1.0 while yahpo-gym pins 0.6, so it runs in a virtualenv
of its own, `.bench-venvs/smac` in the repository (git-ignored), which `ensure_venv` creates on
first use (`pip install smac==2.4.1`). Its process asks the LCBench surrogate for curves from a
`python -m bench.efficiency.surrogate_server` subprocess running in this (the main) virtualenv.

Charging. SMAC's Hyperband asks for a configuration again at a higher budget and its target
function trains it from scratch. The bench charges the generous reading: a run pays only the
epochs it adds over the same configuration's longest earlier run (as if it resumed that run's
checkpoint); the study stops when these reach the budget (the run going on then is cut off and
is not finished). The as-shipped charge (every run pays all its epochs) of the same runs is kept
too (``smac-mf-shipped`` in the tables: the same studies, cut at the budget on that count).

A run at SMAC budget b trains round(b) epochs (Hyperband's budgets are 50 / 3^k: 1.85, 5.6,
16.7, 50 -> 2, 6, 17, 50 epochs); its cost is minus the curve's score at that epoch (SMAC
minimises). A configuration is fully trained when a run reaches `EPOCHS`.

This module runs in both virtualenvs: the main one calls `smac_study` (which starts this module
as a script in SMAC's), SMAC's runs `drive`. At import it needs the standard library only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SMAC_VERSION = "2.4.1"
VENV = REPO / ".bench-venvs" / "smac"

__all__ = ["SMAC_VERSION", "VENV", "SmacUnavailable", "drive", "ensure_venv", "smac_study"]


class SmacUnavailable(RuntimeError):
    """SMAC's virtualenv does not exist and cannot be made (the message says why)."""


def venv_python(venv: Path = VENV) -> Path:
    return venv / "bin" / "python"


def installed_version(venv: Path = VENV) -> str | None:
    """smac's version in `venv` (None: no venv, or no smac in it)."""
    python = venv_python(venv)
    if not python.exists():
        return None
    done = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('smac'))"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.stdout.strip() if done.returncode == 0 else None


def ensure_venv(venv: Path = VENV) -> Path:
    """SMAC's virtualenv's python, created with `pip install smac==SMAC_VERSION` when missing;
    `SmacUnavailable` with pip's own last words when that fails."""
    if installed_version(venv) == SMAC_VERSION:
        return venv_python(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    made = subprocess.run(
        [sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True, timeout=300
    )
    if made.returncode != 0:
        raise SmacUnavailable(f"cannot create {venv}: {_last_line(made.stderr)}")
    pip = subprocess.run(
        [str(venv_python(venv)), "-m", "pip", "install", "-q", f"smac=={SMAC_VERSION}"],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if pip.returncode != 0 or installed_version(venv) != SMAC_VERSION:
        raise SmacUnavailable(
            f"pip install smac=={SMAC_VERSION} into {venv} failed: "
            f"{_last_line(pip.stderr or pip.stdout)}"
        )
    return venv_python(venv)


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("WARNING")]
    return lines[-1].strip() if lines else "(no output)"


def smac_study(
    instance: str, data: str | None, metric: str, budget: int, seed: int
) -> dict[str, Any]:
    """One smac-mf study, run in SMAC's virtualenv: `drive`'s result (values are the metric's
    `score`, higher is better)."""
    python = ensure_venv()
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    cmd = [
        str(python),
        "-m",
        "bench.efficiency.smac_mf",
        "--instance",
        str(instance),
        "--metric",
        metric,
        "--budget",
        str(budget),
        "--seed",
        str(seed),
        "--server-python",
        sys.executable,
    ]
    if data:
        cmd += ["--data", str(data)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(REPO))
    if done.returncode != 0:
        raise RuntimeError(f"smac-mf {instance} seed {seed}: {_last_line(done.stderr)}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- in SMAC's virtualenv ------------------------------------------------------------------------


class SurrogateClient:
    """The surrogate server as a function: config and epochs -> the curve's first epochs."""

    def __init__(self, python: str, instance: str, data: str | None, metric: str) -> None:
        cmd = [python, "-m", "bench.efficiency.surrogate_server", "--instance", instance]
        cmd += ["--metric", metric] + (["--data", data] if data else [])
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=str(REPO),
        )
        hello = self._read()
        if not hello.get("ready"):
            raise RuntimeError(f"surrogate server did not start: {hello}")
        self.maximize = bool(hello["maximize"])

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"surrogate server ended (exit {self.proc.wait()})")
        return json.loads(line)

    def curve(self, config: dict[str, Any], epochs: int) -> dict[str, list[float]]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"config": config, "epochs": epochs}) + "\n")
        self.proc.stdin.flush()
        out = self._read()
        if "error" in out:
            raise RuntimeError(f"surrogate server: {out['error']}")
        return out

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


def config_space(seed: int) -> Any:
    """LCBench's SPACE as a ConfigSpace >= 1.0 space (log-scale where the space is log)."""
    from ConfigSpace import (
        CategoricalHyperparameter,
        ConfigurationSpace,
        UniformFloatHyperparameter,
        UniformIntegerHyperparameter,
    )

    from bench.efficiency.lcbench import SPACE

    cs = ConfigurationSpace(seed=seed)
    for name, p in SPACE.items():
        if p["type"] == "float":
            hp: Any = UniformFloatHyperparameter(name, p["low"], p["high"], log=p.get("log", False))
        elif p["type"] == "int":
            hp = UniformIntegerHyperparameter(name, p["low"], p["high"], log=p.get("log", False))
        else:
            hp = CategoricalHyperparameter(name, p["choices"])
        cs.add(hp)
    return cs


def drive(
    instance: str, data: str | None, metric: str, budget: int, seed: int, server_python: str
) -> dict[str, Any]:
    """One SMAC study by ask and tell until the generous charge reaches `budget`."""
    import logging
    import warnings

    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    from smac import MultiFidelityFacade, Scenario
    from smac.runhistory.dataclasses import TrialValue

    from bench.efficiency.lcbench import EPOCHS

    client = SurrogateClient(server_python, instance, data, metric)
    sign = 1.0 if client.maximize else -1.0
    with tempfile.TemporaryDirectory() as tmp:
        scenario = Scenario(
            config_space(seed),
            name=f"lcbench-{instance}-{seed}",
            output_directory=Path(tmp),
            deterministic=True,
            n_trials=10**9,
            min_budget=1,
            max_budget=EPOCHS,
            seed=seed,
        )

        def target(config: Any, seed: int = 0, budget: float = EPOCHS) -> float:
            raise AssertionError("ask and tell only")

        smac = MultiFidelityFacade(scenario, target, overwrite=True, logging_level=50)
        longest: dict[tuple[Any, ...], int] = {}
        used = shipped = asks = 0
        finished: list[tuple[int, float]] = []
        shipped_finished: list[tuple[int, float]] = []
        while used < budget:
            info = smac.ask()
            asks += 1
            config = dict(info.config)
            key = tuple(sorted(config.items()))
            epochs = min(EPOCHS, max(1, round(info.budget or EPOCHS)))
            add = max(0, epochs - longest.get(key, 0))
            if used + add > budget:  # the budget ends inside this run: cut off, not finished
                used = budget
                break
            used += add
            shipped += epochs
            longest[key] = max(longest.get(key, 0), epochs)
            curve = client.curve(config, epochs)
            score = sign * curve["values"][epochs - 1]
            if epochs == EPOCHS:
                finished.append((used, score))
                shipped_finished.append((shipped, score))
            smac.tell(info, TrialValue(cost=-score), save=False)
    client.close()
    return {
        "finished": finished,
        "epochs": used,
        "shipped_finished": [f for f in shipped_finished if f[0] <= budget],
        "shipped_epochs_total": shipped,
        "trials": asks,
        "configs": len(longest),
    }


def _main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description="one smac-mf study (in SMAC's virtualenv)")
    parser.add_argument("--instance", required=True)
    parser.add_argument("--data", default=None)
    parser.add_argument("--metric", default="val_accuracy")
    parser.add_argument("--budget", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--server-python", required=True)
    args = parser.parse_args()
    out = drive(args.instance, args.data, args.metric, args.budget, args.seed, args.server_python)
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(_main())
