"""Workers started one by one on a machine: torch's default threads against each worker's
share of the cores (search.worker.cpu_share), side by side.

Study: the digits example (examples/digits.toml's space and model), `--trials` trials of
`--epochs` epochs, random sampler, no pruner, on SQLite in a temporary directory. N separate
`hpsearch worker --device cpu` processes are started at once (as README's fleet section or a
scheduler does), for N in `--workers`:

- default: every worker with ``OMP_NUM_THREADS`` = the machine's cores, which is what torch
  picks when nothing is set (what each worker did before the share);
- share: nothing set; each worker takes cores // (live workers on its host) threads.

Reported: the study's wall time (workers' start to the last one's exit) and the seconds per
epoch of its trials (each trial's wall_seconds / epochs_trained, mean over the trials), mean
and standard deviation over `--repeats`, variants interleaved (order flipped each repeat).

    python -m bench.systems.cpu_share --workers 1,2,4 --trials 8 --epochs 3 --repeats 2
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CONFIG = """
[study]
name = "share"
direction = "maximize"
metric = "val_accuracy"
n_trials = {trials}
sampler = "random"
seed = {seed}

[pruner]
type = "none"

[task]
name = "digits"
epochs = {epochs}

[space]
lr = {{ type = "float", low = 1e-4, high = 1e-1, log = true }}
weight_decay = {{ type = "float", low = 1e-6, high = 1e-2, log = true }}
batch_size = {{ type = "categorical", choices = [32, 64, 128] }}
dropout = {{ type = "float", low = 0.0, high = 0.5 }}
width = {{ type = "int", low = 8, high = 64, log = true }}
"""


def one_study(
    n_workers: int, variant: str, trials: int, epochs: int, seed: int
) -> tuple[float, float]:
    """(wall seconds, mean seconds per epoch) of one study."""
    import optuna

    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "share.toml"
        config.write_text(CONFIG.format(trials=trials, epochs=epochs, seed=seed))
        url = f"sqlite:///{tmp}/study.db"
        env = {k: v for k, v in os.environ.items() if not k.startswith("HPSEARCH_")}
        env.update(PYTHONPATH=str(REPO), HPSEARCH_STORAGE=url, HPSEARCH_PROGRESS="0")
        env.pop("OMP_NUM_THREADS", None)
        subprocess.run(
            [sys.executable, "-m", "search", "create", str(config)],
            env=env, cwd=tmp, check=True, capture_output=True,
        )  # fmt: skip
        if variant == "default":
            env["OMP_NUM_THREADS"] = str(len(os.sched_getaffinity(0)))
        started = time.monotonic()
        workers = [
            subprocess.Popen(
                [sys.executable, "-m", "search", "worker", "--study", "share", "--device", "cpu"],
                env=env,
                cwd=tmp,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for _ in range(n_workers)
        ]
        codes = [w.wait() for w in workers]
        wall = time.monotonic() - started
        assert codes == [0] * n_workers, codes
        study = optuna.load_study(study_name="share", storage=url)
        per_epoch = [
            t.user_attrs["wall_seconds"] / t.user_attrs["epochs_trained"]
            for t in study.trials
            if t.user_attrs.get("epochs_trained")
        ]
        return wall, statistics.mean(per_epoch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    counts = [int(n) for n in args.workers.split(",")]
    results: dict[tuple[int, str], list[tuple[float, float]]] = {}
    print(f"load average before: {os.getloadavg()[0]:.1f}", flush=True)
    for repeat in range(args.repeats):
        variants = ["default", "share"] if repeat % 2 == 0 else ["share", "default"]
        for n in counts:
            for variant in variants:
                wall, per_epoch = one_study(n, variant, args.trials, args.epochs, seed=repeat)
                results.setdefault((n, variant), []).append((wall, per_epoch))
                print(
                    f"repeat {repeat} workers {n} {variant}: wall {wall:.1f} s, "
                    f"{per_epoch:.2f} s/epoch (load {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
    print("\n| workers | threads | study wall s (sd) | s/epoch (sd) |")
    print("| --- | --- | --- | --- |")
    for n in counts:
        for variant in ("default", "share"):
            runs = results[(n, variant)]
            walls, epochs = [r[0] for r in runs], [r[1] for r in runs]
            print(
                f"| {n} | {variant} | {statistics.mean(walls):.1f} ({_sd(walls):.1f}) | "
                f"{statistics.mean(epochs):.2f} ({_sd(epochs):.2f}) |"
            )
    print(f"load average after: {os.getloadavg()[0]:.1f}")


def _sd(xs: list[float]) -> float:
    return statistics.stdev(xs) if len(xs) > 1 else 0.0


if __name__ == "__main__":
    main()
