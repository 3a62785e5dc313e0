"""What a preempted worker costs: a study with one worker stopped once, against the same study
uninterrupted, side by side; and checkpoint save/load time and size for the built-in model.

Study: digits CNN (width 64, depth 3), 16 trials of 6 epochs, random sampler, no pruner, two
`hpsearch worker` processes on PostgreSQL, checkpoints in the database (the default). In the
interrupted runs one worker is stopped in the middle of a trial, after its first epochs, and a
replacement process is started at once (a spot instance coming back):

- kill -9: the trial waits out the dead worker's grace period, then resumes from its last
  checkpoint (the target: interrupted <= 1.05 x uninterrupted + grace);
- SIGTERM: the worker checkpoints and hands the trial back at once; no grace period.

Either way the replacement needs a few seconds to start (importing torch), during which the
study runs on one worker: that start-up is part of what a preemption costs.

Wall time runs from the workers' start to the study's last trial recorded finished. Each
variant runs `--repeats` times, interleaved; mean and standard deviation are reported.

    python -m bench.systems.preemption                 # 3 repeats, grace 5 s (about 10 minutes)
"""

from __future__ import annotations

import argparse
import datetime
import io
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

CONFIG = """
[study]
name = "{name}"
n_trials = 16
sampler = "random"
seed = {seed}

[pruner]
type = "none"

[task]
name = "digits"
epochs = 6

[space]
lr = {{ type = "float", low = 1e-3, high = 1e-2, log = true }}
width = {{ type = "categorical", choices = [64] }}
depth = {{ type = "categorical", choices = [3] }}
batch_size = {{ type = "categorical", choices = [64] }}
"""


def run_study(url: str, workdir: Path, seed: int, stop: int | None, grace_s: float) -> float:
    """Wall seconds of one study; `stop` = signal sent to one worker mid-trial (then replaced)."""
    import optuna
    import sqlalchemy as sa

    from bench.systems.scheduler import last_finished_utc
    from search.db.storage import open_storage
    from search.sampling.sample_ahead import queue_first_trials
    from search.study.parse_config import load_config
    from search.study.studies import create_study

    name = f"preempt-{uuid.uuid4().hex[:8]}"
    config = workdir / f"{name}.toml"
    config.write_text(CONFIG.format(name=name, seed=seed))
    storage = open_storage(url, create=True)
    queue_first_trials(storage, create_study(storage, load_config(config))[0])
    started = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    workers = [_worker(url, name, grace_s, workdir, i) for i in range(2)]
    if stop is not None:
        # Wait until worker 0 is inside a trial, past its first checkpoint.
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        query = sa.text(
            "SELECT count(*) FROM trial_intermediate_values v JOIN hpsearch.trial_leases l "
            "USING (trial_id) JOIN hpsearch.workers w ON w.worker_id = l.worker_id "
            "WHERE w.pid = :pid AND l.worker_id IS NOT NULL AND v.step >= 2 "
            "AND v.trial_id IN (SELECT trial_id FROM trials WHERE state = 'RUNNING')"
        )
        while True:
            with engine.connect() as conn:
                if conn.execute(query, {"pid": workers[0].pid}).scalar_one():
                    break
            time.sleep(0.05)
        engine.dispose()
        workers[0].send_signal(stop)
        workers[0].wait()
        workers.append(_worker(url, name, grace_s, workdir, 2))
    for w in workers:
        if w.wait() not in (0, -9):
            raise RuntimeError(f"a worker failed; see {workdir}")
    trials = optuna.load_study(study_name=name, storage=url).trials
    assert len(trials) == 16 and all(t.state.name == "COMPLETE" for t in trials)
    return (last_finished_utc(trials) - started).total_seconds()


def _worker(url: str, study: str, grace_s: float, workdir: Path, i: int) -> subprocess.Popen:
    env = {**os.environ, "HPSEARCH_STORAGE": url, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    log = open(workdir / f"{study}-w{i}.log", "w")  # noqa: SIM115 (lives as long as the child)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "search",
            "worker",
            "--study",
            study,
            "--device",
            "cpu",
            "--grace-s",
            str(grace_s),
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def checkpoint_costs(url: str, repeats: int) -> dict[str, Any]:
    """Size and save/load times of a real checkpoint of the built-in model."""
    import torch

    from search.db.artifacts import DatabaseArtifactStore
    from search.db.migrate import upgrade
    from search.db.storage import open_storage
    from search.worker.artifacts import DirectoryArtifactStore
    from trainer import DirectoryCheckpointStore, TrainConfig, resolve_task, train

    with tempfile.TemporaryDirectory() as tmp:
        store = DirectoryCheckpointStore(tmp)
        params = {"lr": 3e-3, "width": 64, "depth": 3, "batch_size": 64}
        train(
            resolve_task("digits"), params, TrainConfig(epochs=1), checkpoints=store, device="cpu"
        )
        state = store.load()
    assert state is not None
    storage = open_storage(url, create=True)
    upgrade(storage)
    stores = {
        "directory": DirectoryArtifactStore(tempfile.mkdtemp(prefix="hpsearch-bench-")),
        "postgresql": DatabaseArtifactStore(storage),
    }
    times: dict[str, list[float]] = {}

    def timed(key: str, fn: Any) -> Any:
        t = time.perf_counter()
        out = fn()
        times.setdefault(key, []).append(1000 * (time.perf_counter() - t))
        return out

    size = 0
    for _ in range(repeats):
        buffer = io.BytesIO()
        timed("serialize (torch.save)", lambda b=buffer: torch.save(state, b))
        size = buffer.tell()
        for where, artifacts in stores.items():
            buffer.seek(0)
            timed(f"write to {where}", lambda a=artifacts, b=buffer: a.write("bench", b))
            data = timed(f"read from {where}", lambda a=artifacts: a.open_reader("bench").read())
            assert len(data) == size
        timed(
            "deserialize (torch.load, weights_only)",
            lambda d=data: torch.load(io.BytesIO(d), weights_only=True),
        )
    stores["postgresql"].remove("bench")
    params_count = sum(v.numel() for v in state["model"].values())
    return {
        "parameters": params_count,
        "checkpoint_bytes": size,
        "ms": {
            k: (statistics.mean(v), statistics.stdev(v) if len(v) > 1 else 0.0)
            for k, v in times.items()
        },
    }


def main() -> None:
    from bench.systems.scheduler import BENCH_STORAGE, _ensure_database

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage", default=BENCH_STORAGE)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--grace-s", type=float, default=5.0)
    args = parser.parse_args()
    _ensure_database(args.storage)
    variants = {"uninterrupted": None, "kill -9": signal.SIGKILL, "SIGTERM": signal.SIGTERM}
    walls: dict[str, list[float]] = {k: [] for k in variants}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            order = list(variants) if repeat % 2 == 0 else list(reversed(variants))
            for variant in order:
                wall = run_study(args.storage, Path(tmp), repeat, variants[variant], args.grace_s)
                walls[variant].append(wall)
                print(f"repeat {repeat} {variant}: {wall:.1f} s", flush=True)

    base = statistics.mean(walls["uninterrupted"])
    print(
        f"\nstudy of 16 trials x 6 epochs, 2 workers, grace {args.grace_s:g} s, "
        f"{args.repeats} repeats; {os.cpu_count()} CPUs"
    )
    print(f"{'variant':<14} {'wall s (sd)':>14} {'ratio':>7} {'ratio, grace taken out':>23}")
    for variant, values in walls.items():
        mean = statistics.mean(values)
        sd = statistics.stdev(values) if len(values) > 1 else 0.0
        grace = args.grace_s if variant == "kill -9" else 0.0
        print(
            f"{variant:<14} {mean:>8.1f} ({sd:.1f}) {mean / base:>7.3f} "
            f"{(mean - grace) / base:>23.3f}"
        )

    costs = checkpoint_costs(args.storage, max(5, args.repeats))
    print(
        f"\ncheckpoint of the digits CNN ({costs['parameters']:,} parameters): "
        f"{costs['checkpoint_bytes'] / 1e6:.2f} MB (model, AdamW state, scheduler, RNG)"
    )
    for key, (mean, sd) in costs["ms"].items():
        print(f"  {key:<40} {mean:8.2f} ms (sd {sd:.2f})")


if __name__ == "__main__":
    main()
