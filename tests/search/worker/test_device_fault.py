"""A CUDA error poisons its process: the trial goes back (one failed attempt of its crash
budget), the worker exits 1, and `--gpus all` starts a fresh child. Real worker processes on
PostgreSQL; the error is raised on the CPU with torch's message
(tests/helpers/device_fault_task.py)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import optuna
import pytest

from search.db.storage import open_storage
from search.sampling.sample_ahead import queue_first_trials
from search.study.parse_config import parse_config
from search.study.studies import create_study
from search.worker.launcher import run_worker_processes
from search.worker.start import WorkerOptions
from tests.helpers import REPO
from tests.helpers.device_fault_task import ILLEGAL_ACCESS, POISON_X
from tests.helpers.processes import WorkerProcess

pytestmark = pytest.mark.slow


def _study(url: str, name: str) -> optuna.Study:
    """4 trials of the device-fault task; trial 0 is the poisonous one; max_attempts 2."""
    storage = open_storage(url)
    config = parse_config(
        {
            "study": {"name": name, "n_trials": 4, "sampler": "random", "max_attempts": 2},
            "pruner": {"type": "none"},
            "task": {"name": "tests.helpers.device_fault_task:make_task", "epochs": 2},
            "space": {
                "x": {"type": "float", "low": 0.0, "high": 1.0},
                "width": {"type": "categorical", "choices": [4, 8]},
            },
        }
    )
    ref, _ = create_study(storage, config)
    study = optuna.load_study(study_name=name, storage=url)
    study.enqueue_trial({"x": POISON_X})
    queue_first_trials(storage, ref)
    storage.close()
    return study


def _assert_poisoned_trial_failed_and_the_rest_completed(study: optuna.Study) -> None:
    trials = study.get_trials()
    assert len(trials) == 4 and all(t.state.is_finished() for t in trials)
    poisoned = [t for t in trials if t.params["x"] == POISON_X]
    assert len(poisoned) == 1 and poisoned[0].state.name == "FAIL"
    attempts = poisoned[0].system_attrs["hpsearch:failed_attempts"]
    assert len(attempts) == 2 and len({a["worker_id"] for a in attempts}) == 2
    assert all(a["how"] == f"RuntimeError: {ILLEGAL_ACCESS}" for a in attempts)
    assert poisoned[0].system_attrs["fail_reason"].startswith("its worker died 2 times")
    assert all(t.state.name == "COMPLETE" for t in trials if t is not poisoned[0])


def test_a_cuda_error_hands_the_trial_back_and_ends_the_worker(
    pg_url: str, study_name: str, tmp_path: Path
) -> None:
    study = _study(pg_url, study_name)
    codes, logs = [], []
    for i in range(4):  # as a supervisor would: start a worker again after each exit 1
        worker = WorkerProcess(pg_url, study_name, tmp_path, grace_s=5, name=f"w{i}")
        codes.append(worker.wait(180))
        logs.append(worker.log())
        if codes[-1] == 0:
            break
    assert codes == [1, 1, 0], logs
    first, second = (log.strip().splitlines()[-1] for log in logs[:2])
    assert first == (
        f"hpsearch: error: this worker stops: RuntimeError: {ILLEGAL_ACCESS} "
        "(trial 0 handed back for another worker)"
    )
    assert second.endswith("(trial 0 it ends FAIL, its worker having died 2 times)")
    assert "Traceback" not in logs[0] + logs[1]
    _assert_poisoned_trial_failed_and_the_rest_completed(study)


def test_gpus_all_parent_restarts_a_child_that_exits_1(
    pg_url: str, study_name: str, monkeypatch: Any, caplog: Any, capfd: Any
) -> None:
    study = _study(pg_url, study_name)
    for name in ("HPSEARCH_ARTIFACTS", "HPSEARCH_DEVICE_MEMORY", "HPSEARCH_GRACE_S"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    options = WorkerOptions(artifacts=None, grace_s=5.0, keep_checkpoints=False, device_memory=None)
    with caplog.at_level(logging.INFO, logger="search.worker.launcher"):
        # Two CPU children stand in for two GPUs: the parent's logic is the same.
        code = run_worker_processes(
            pg_url, study_name, ["cpu", "cpu"], options.argv(), restart_failed=True
        )
    assert code == 0
    restarts = [r.getMessage() for r in caplog.records if "starting a new one" in r.getMessage()]
    assert restarts == [
        "worker on cpu exited 1; starting a new one in 2 s (restart 1 of 3)",
        "worker on cpu exited 1; starting a new one in 2 s (restart 1 of 3)",
    ] or restarts == [
        "worker on cpu exited 1; starting a new one in 2 s (restart 1 of 3)",
        "worker on cpu exited 1; starting a new one in 4 s (restart 2 of 3)",
    ]
    assert ILLEGAL_ACCESS in capfd.readouterr().err  # the children's own lines came through
    _assert_poisoned_trial_failed_and_the_rest_completed(study)


def test_a_child_that_exits_2_is_not_restarted(pg_url: str, monkeypatch: Any, caplog: Any) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    options = WorkerOptions(artifacts=None, grace_s=5.0, keep_checkpoints=False, device_memory=None)
    with caplog.at_level(logging.INFO, logger="search.worker.launcher"):
        code = run_worker_processes(
            pg_url, "no-such-study", ["cpu"], options.argv(), restart_failed=True
        )
    assert code == 1
    assert not any("starting a new one" in r.getMessage() for r in caplog.records)
