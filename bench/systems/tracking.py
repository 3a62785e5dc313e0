"""Cost of experiment tracking per epoch: the same study trained with tracking off, to a live
MLflow server, to an MLflow server that is down, and to W&B offline, side by side.

Each mode runs a fresh study (PostgreSQL, one in-process worker, 6 trials of 10 epochs of
tests/helpers/tiny_task.py: epochs of milliseconds, so that any time tracking adds on the
training thread shows) per repeat; modes alternate within each repeat so that the machine's
load falls on all alike (after one warm-up study, not counted). Per epoch: the trainer's wall
seconds of each trial over its epochs. Per study: the worker's time from start to exit (with
tracking, it includes sending what is still queued when the study ends, at most 10 s without
progress). And the cost of one report call on the training thread: the worker's callback
wrapped by the trackers' (5000 calls).

    python -m bench.systems.tracking --repeats 5
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import optuna

from search.db.storage import open_storage
from search.study.studies import create_study
from search.worker.loop import Worker
from search.worker.tracked import TrialTracking
from tests.helpers.postgres import fresh_database, migrated
from tests.helpers.trackers import MlflowServer, tracked_config

MODES = ("off", "mlflow", "mlflow-down", "wandb-offline")


def run_study(url: str, mode: str, server: MlflowServer, wandb_dir: Path) -> dict[str, float]:
    name = f"bench-tracking-{mode}-{uuid.uuid4().hex[:6]}"
    tracking: dict[str, Any] = {
        "off": {},
        "mlflow": {"mlflow": {"uri": server.uri, "experiment": "bench-tracking"}},
        "mlflow-down": {"mlflow": {"uri": "http://127.0.0.1:9", "experiment": "x"}},
        "wandb-offline": {"wandb": {"project": "bench-tracking", "mode": "offline"}},
    }[mode]
    config = tracked_config(name, tracking, n_trials=6)
    data = config.to_dict()
    data["pruner"] = {"type": "none"}
    data["task"]["epochs"] = 10
    config = type(config).from_dict(data)
    storage = open_storage(url)
    study, _ = create_study(storage, config)
    os.environ["WANDB_DIR"] = str(wandb_dir)
    started = time.perf_counter()
    assert Worker(storage, study, grace_s=30, progress=False).run() == 0
    study_s = time.perf_counter() - started
    trials = optuna.load_study(study_name=name, storage=url).trials
    assert len(trials) == 6 and all(t.state.name == "COMPLETE" for t in trials)
    per_epoch = [t.user_attrs["wall_seconds"] / t.user_attrs["epochs_trained"] for t in trials]
    return {"epoch_ms": 1000 * statistics.mean(per_epoch), "study_s": study_s}


def report_call_us(url: str, mode: str, server: MlflowServer, calls: int = 5000) -> float:
    """Microseconds one report call costs the training thread: the worker's report callback
    (here one that does nothing) wrapped by the trackers' (which queues the value)."""
    name = f"bench-report-{mode}-{uuid.uuid4().hex[:6]}"
    tracking: dict[str, Any] = {
        "off": {},
        "mlflow": {"mlflow": {"uri": server.uri, "experiment": "bench-report"}},
        "mlflow-down": {"mlflow": {"uri": "http://127.0.0.1:9", "experiment": "x"}},
        "wandb-offline": {"wandb": {"project": "bench-report", "mode": "offline"}},
    }[mode]
    study, _ = create_study(open_storage(url), tracked_config(name, tracking))
    tracking_hooks = TrialTracking(study, worker_id="bench", device="cpu")
    report = tracking_hooks.reporting(0, lambda epoch, value: False)
    started = time.perf_counter()
    for epoch in range(1, calls + 1):
        report(epoch, 0.5)
    per_call = (time.perf_counter() - started) / calls * 1e6
    tracking_hooks.close(study_done=False)
    return per_call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    results: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    calls: dict[str, list[float]] = {m: [] for m in MODES}
    root = Path(tempfile.mkdtemp(prefix="bench-tracking-"))
    with fresh_database() as backend, fresh_database() as study_db:
        url = migrated(study_db)
        server = MlflowServer(backend, root)
        server.start()
        try:
            run_study(url, "off", server, root / "wandb")  # warm-up: torch, the task, caches
            for repeat in range(args.repeats):
                for mode in MODES:
                    results[mode].append(run_study(url, mode, server, root / "wandb"))
                    calls[mode].append(report_call_us(url, mode, server))
                    print(
                        f"repeat {repeat + 1} {mode}: {results[mode][-1]}, "
                        f"report call {calls[mode][-1]:.1f} us",
                        file=sys.stderr,
                    )
        finally:
            server.stop()
            shutil.rmtree(root, ignore_errors=True)
    base = statistics.mean(r["epoch_ms"] for r in results["off"])
    print(f"\n{args.repeats} repeats, 6 trials x 10 epochs each; mean (sd) over repeats\n")
    print(
        "| tracking | ms per epoch | added per epoch | report call on the training thread (us) "
        "| study, start to exit (s) |"
    )
    print("| --- | --- | --- | --- | --- |")
    for mode in MODES:
        epoch = [r["epoch_ms"] for r in results[mode]]
        study = [r["study_s"] for r in results[mode]]
        sd = statistics.stdev(epoch) if len(epoch) > 1 else 0.0
        sds = statistics.stdev(study) if len(study) > 1 else 0.0
        added = "-" if mode == "off" else f"{statistics.mean(epoch) - base:+.2f} ms"
        call = calls[mode]
        sdc = statistics.stdev(call) if len(call) > 1 else 0.0
        print(
            f"| {mode} | {statistics.mean(epoch):.2f} ({sd:.2f}) | {added} | "
            f"{statistics.mean(call):.1f} ({sdc:.1f}) | {statistics.mean(study):.1f} ({sds:.1f}) |"
        )


if __name__ == "__main__":
    main()
