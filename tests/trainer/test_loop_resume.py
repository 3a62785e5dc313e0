"""Exact resume after SIGKILL: a killed run, resumed in a new process, ends bit-identical."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.toy_task import assert_same_weights, weights
from trainer import DirectoryCheckpointStore

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]

RUN = """
import json, os, signal, sys
from trainer import DirectoryCheckpointStore, TrainConfig, train
from trainer.tasks.digits import make_task

directory, kill_epoch, kill_step = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

def report(epoch, metric):
    if kill_step == 0 and epoch == kill_epoch:  # after epoch k's checkpoint, before more
        os.kill(os.getpid(), signal.SIGKILL)
    return False

def progress(epoch, step, steps, loss):
    if kill_step and (epoch, step) == (kill_epoch, kill_step):
        os.kill(os.getpid(), signal.SIGKILL)

params = {"lr": 3e-3, "batch_size": 48, "width": 8, "depth": 2, "dropout": 0.2}
config = TrainConfig(epochs=4, seed=7, grad_accum_steps=2,
                     checkpoint_every_s=1e-9 if kill_step else 300.0)
result = train(make_task, params, config, report=report, progress=progress, device="cpu",
               checkpoints=DirectoryCheckpointStore(directory))
print(json.dumps({"status": result.status, "metrics": result.metrics,
                  "resumed_from": result.resumed_from}))
"""


def _run(directory: Path, kill_epoch: int = 0, kill_step: int = 0) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", RUN, str(directory), str(kill_epoch), str(kill_step)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: Any) -> tuple[dict, DirectoryCheckpointStore]:
    directory = tmp_path_factory.mktemp("uninterrupted")
    run = _run(directory)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout), DirectoryCheckpointStore(directory)


@pytest.mark.parametrize(
    ("kill_epoch", "kill_step", "resumed_from"),
    [(2, 0, {"epoch": 2, "step": 0}), (3, 11, {"epoch": 2, "step": 10})],
    ids=["after-epoch-2", "mid-epoch-3"],
)
def test_sigkill_then_resume_is_bit_identical(
    tmp_path: Path, uninterrupted: Any, kill_epoch: int, kill_step: int, resumed_from: dict
) -> None:
    killed = _run(tmp_path, kill_epoch, kill_step)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = _run(tmp_path, 0, 0)
    assert resumed.returncode == 0, resumed.stderr
    result = json.loads(resumed.stdout)
    expected, expected_store = uninterrupted
    assert result["status"] == expected["status"] == "completed"
    assert result["resumed_from"] == resumed_from
    assert result["metrics"] == expected["metrics"]  # exactly, not approximately
    assert_same_weights(weights(DirectoryCheckpointStore(tmp_path)), weights(expected_store))
    state = DirectoryCheckpointStore(tmp_path).load()
    assert state["optimizer"] is not None and state["scheduler"]["last_epoch"] == 4 * 29
