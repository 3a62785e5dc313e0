"""Shared parts of the tracking tests: a real `mlflow server`, a small study that trains for
real (tests/helpers/tiny_task.py), and a worker preempted mid-trial by a real SIGTERM."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from search.db.storage import Storage
from search.study.parse_config import parse_config
from search.study.studies import StudyRef
from search.worker.artifacts import artifact_store_for
from search.worker.loop import Worker
from search.worker.training import run_training
from search.worker.trial import TrialRun
from tests.helpers.postgres import fresh_database

EPOCHS = 6


class MlflowServer:
    """`mlflow server` on a free loopback port: a fresh PostgreSQL database as its backend
    store, a temporary directory as its artifact root. `stop` and `start` again keep both."""

    def __init__(self, backend_url: str, root: Path) -> None:
        self.backend_url = backend_url
        self.root = root
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.uri = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        mlflow = shutil.which("mlflow", path=os.path.dirname(sys.executable)) or "mlflow"
        log = open(self.root / "server.log", "ab")  # noqa: SIM115 (the server holds it)
        self.process = subprocess.Popen(
            [
                mlflow,
                "server",
                "--backend-store-uri",
                self.backend_url,
                "--default-artifact-root",
                str(self.root / "artifacts"),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--workers",
                "1",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=1):
                    return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    tail = (self.root / "server.log").read_text()[-3000:]
                    pytest.fail(f"mlflow server did not start:\n{tail}", pytrace=False)
                time.sleep(0.2)

    def stop(self) -> None:
        """Gone at once, as a crashed server (its store keeps what it committed)."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        self.process = None


def forget_quick_fail() -> None:
    """Undo what an in-process worker set for the whole process (`QUICK_FAIL_ENV`): the test's
    own MLflow client and `hpsearch export` use MLflow's patient defaults, as in their own
    processes."""
    from search.tracking.mlflow_tracker import QUICK_FAIL_ENV

    for name in QUICK_FAIL_ENV:
        os.environ.pop(name, None)


def mlflow_server_fixture() -> Iterator[MlflowServer]:
    with fresh_database() as backend:
        root = Path(tempfile.mkdtemp(prefix="hpsearch-test-mlflow-"))
        server = MlflowServer(backend, root)
        server.start()
        try:
            yield server
        finally:
            server.stop()
            shutil.rmtree(root, ignore_errors=True)


def tracked_config(name: str, tracking: dict[str, Any], n_trials: int = 8) -> Any:
    return parse_config(
        {
            "study": {"name": name, "n_trials": n_trials, "sampler": "random", "seed": 3},
            "pruner": {"type": "median", "n_startup_trials": 2, "n_warmup_steps": 1},
            "task": {"name": "tests.helpers.tiny_task:make_task", "epochs": EPOCHS},
            "train": {"checkpoint_every_s": 60},
            "space": {
                "lr": {"type": "float", "low": 1e-5, "high": 1.0, "log": True},
                "batch_size": {"type": "categorical", "choices": [16, 32]},
            },
            "tracking": tracking,
        }
    )


FAILING_TRIAL = 6
FAILURE = "RuntimeError: the task's data loader broke"


def run_study_with_a_preempted_trial(storage: Storage, study: StudyRef) -> None:
    """Worker A trains until trial 0 reaches epoch 2, is sent SIGTERM there (it checkpoints
    trial 0 and hands it back); worker B, another worker with trackers of its own, resumes
    it from its checkpoint and trains the rest of the study, where trial 6 fails at epoch 2
    (its task raises)."""
    artifacts = artifact_store_for(storage, None)

    def preempted_at_epoch_2(run: TrialRun) -> Any:
        if run.number == 0:
            report = run.report

            def report_then_sigterm(epoch: int, value: float) -> bool:
                stop = report(epoch, value)
                if epoch == 2:
                    os.kill(os.getpid(), signal.SIGTERM)  # as a spot instance's notice
                return stop

            run.report = report_then_sigterm
        return run_training(run)

    first = Worker(
        storage,
        study,
        run_trial=preempted_at_epoch_2,
        grace_s=5,
        progress=False,
        artifacts=artifacts,
    )
    assert first.run() == 0
    # Worker A's process would end here, and its tracker threads with it. In this one process
    # a sender given up on (SIGTERM leaves it HURRY_S) may still be inside a call to a server
    # slowed by a loaded machine; that call must not land in the middle of worker B's updates
    # of the same run (it would set the resumed trial's state back to running).
    for thread in threading.enumerate():
        if thread.name.startswith("tracker-"):
            thread.join(60)

    def failing_at_epoch_2(run: TrialRun) -> Any:
        if run.number == FAILING_TRIAL:
            report = run.report

            def report_then_raise(epoch: int, value: float) -> bool:
                stop = report(epoch, value)
                if epoch == 2:
                    raise RuntimeError(FAILURE.split(": ", 1)[1])
                return stop

            run.report = report_then_raise
        return run_training(run)

    second = Worker(
        storage,
        study,
        run_trial=failing_at_epoch_2,
        grace_s=5,
        progress=False,
        artifacts=artifacts,
    )
    assert second.run() == 0
    forget_quick_fail()
