"""Multi-rank trials (`--gpus-per-trial K`) on the CPU: two real rank processes over gloo.

(a) Two ranks train exactly the steps one process trains: same effective batch, same weights,
same optimizer and scheduler steps. (b) A pruning decision stops both ranks at the same epoch.
(c) A stop request preempts both ranks with a checkpoint, and one process resumes it to the
weights of an uninterrupted run. (d) A rank that raises ends the trial FAIL, saying which rank.
(e) Through `hpsearch worker` on PostgreSQL: a rank killed with SIGKILL hands its trial back
at once (a failed attempt), the worker retries it, and the study completes; SIGTERM to a
2-rank worker checkpoints and hands back, and a one-process worker finishes the trial from that
checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import threading
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
import torch

from search.db.storage import open_storage
from search.study.parse_config import load_config
from search.study.studies import create_study
from search.worker.launcher import gpu_groups, trial_devices
from search.worker.trial import TrialRun
from search.worker.trial_group import run_trial_group
from tests.helpers import REPO
from tests.helpers.cli import hpsearch
from tests.helpers.processes import (
    WorkerProcess,
    query,
    reported_epochs,
    trial_states,
    wait_for,
)
from trainer import DirectoryCheckpointStore, resolve_task, train

SEED = 7
PARAMS = {"lr": 0.01, "width": 8, "batch_size": 64, "dropout": 0.0}
"""No dropout: with the same data and weights, two ranks must compute what one process does."""

CONFIG = """
[study]
name = "{name}"
direction = "maximize"
n_trials = {n_trials}
sampler = "random"
seed = 3
max_attempts = 3

[pruner]
type = "none"

[task]
name = "{task}"
epochs = 2

[train]
checkpoint_every_s = 600

[space]
lr = {{ type = "float", low = 1e-3, high = 3e-2, log = true }}
width = {{ type = "int", low = 4, high = 12 }}
batch_size = {{ type = "categorical", choices = [64] }}
{extra}
"""


def write_config(
    tmp_path: Path, name: str = "ddp", n_trials: int = 1, task: str = "digits", extra: str = ""
) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(CONFIG.format(name=name, n_trials=n_trials, task=task, extra=extra))
    return path


def group_run(
    config_path: Path,
    checkpoints: DirectoryCheckpointStore,
    report: Any = None,
    params: dict[str, Any] = PARAMS,
) -> TrialRun:
    stop = threading.Event()
    return TrialRun(
        number=0,
        trial_id=0,
        params=dict(params),
        config=load_config(config_path),
        seed=SEED,
        device="cpu x2",
        report=report or (lambda epoch, value: False),
        stop=stop,
        checkpoints=checkpoints,
    )


def model_of(directory: Path) -> dict[str, Any]:
    return torch.load(directory / "checkpoint.pt", weights_only=True)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The uninterrupted run in one process: its result and final checkpoint."""
    tmp = tmp_path_factory.mktemp("one")
    config = load_config(write_config(tmp))
    result = train(
        resolve_task("digits"),
        PARAMS,
        dataclasses.replace(config.train, seed=SEED),
        checkpoints=DirectoryCheckpointStore(tmp / "ckpt"),
        device="cpu",
    )
    assert result.status == "completed", result.reason
    return {"result": result, "checkpoint": model_of(tmp / "ckpt")}


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.allclose(a[name], b[name], rtol=1e-4, atol=1e-5), name


@pytest.mark.slow
def test_two_ranks_train_the_steps_one_process_trains(
    tmp_path: Path, one_process: dict[str, Any]
) -> None:
    run = group_run(write_config(tmp_path), DirectoryCheckpointStore(tmp_path / "ckpt"))
    outcome = run_trial_group(run, devices=["cpu", "cpu"])
    assert outcome.status == "completed", outcome.reason
    ddp = outcome.user_attrs["data_parallel"]
    # The configured batch of 64 is 2 ranks x 32 samples x 1 micro-batch.
    assert ddp["ranks"] == 2 and ddp["batch_size"] == 64
    assert ddp["per_rank_micro_batch"] == 32
    assert [end["status"] for end in ddp["rank_ends"]] == ["completed", "completed"]
    single, double = one_process["checkpoint"], model_of(tmp_path / "ckpt")
    # Same number of optimizer steps, and the schedule stepped once per step (not per rank).
    assert (
        double["train_state"]["loop"]["optimizer_steps"]
        == single["train_state"]["loop"]["optimizer_steps"]
    )
    assert double["scheduler"]["last_epoch"] == single["scheduler"]["last_epoch"]
    # The gradient of the whole step, averaged over the ranks: the same weights.
    assert_same_weights(double["model"], single["model"])
    assert outcome.value == pytest.approx(one_process["result"].metrics[-1], abs=2e-3)


@pytest.mark.slow
def test_a_pruning_decision_stops_both_ranks_at_the_same_epoch(tmp_path: Path) -> None:
    asked: list[int] = []

    def prune_after_first_epoch(epoch: int, value: float) -> bool:
        asked.append(epoch)
        return True

    run = group_run(
        write_config(tmp_path), DirectoryCheckpointStore(tmp_path / "c"), prune_after_first_epoch
    )
    outcome = run_trial_group(run, devices=["cpu", "cpu"])
    assert outcome.status == "pruned", outcome.reason
    assert asked == [1]  # rank 0 asked once, for both
    ends = outcome.user_attrs["data_parallel"]["rank_ends"]
    assert ends == [
        {"rank": 0, "status": "pruned", "epochs": 1},
        {"rank": 1, "status": "pruned", "epochs": 1},
    ]


@pytest.mark.slow
def test_a_two_rank_checkpoint_resumes_in_one_process(
    tmp_path: Path, one_process: dict[str, Any]
) -> None:
    store = DirectoryCheckpointStore(tmp_path / "ckpt")
    holder: dict[str, TrialRun] = {}

    def stop_after_first_epoch(epoch: int, value: float) -> bool:
        holder["run"].stop.set()  # as SIGTERM to the worker does
        return False

    run = group_run(write_config(tmp_path), store, stop_after_first_epoch)
    holder["run"] = run
    outcome = run_trial_group(run, devices=["cpu", "cpu"])
    assert outcome.status == "preempted", outcome.reason
    ends = outcome.user_attrs["data_parallel"]["rank_ends"]
    assert [e["status"] for e in ends] == ["preempted", "preempted"]
    assert model_of(tmp_path / "ckpt")["train_state"]["loop"]["epoch"] == 1

    config = load_config(write_config(tmp_path))
    resumed = train(
        resolve_task("digits"),
        PARAMS,
        dataclasses.replace(config.train, seed=SEED),
        checkpoints=store,
        device="cpu",
    )
    assert resumed.status == "completed", resumed.reason
    # The stop reaches the ranks at a step boundary: at once after epoch 1's report, or (on a
    # loaded machine) a step later. Either way the run goes on from inside epoch 2 exactly.
    assert resumed.resumed_from is not None and resumed.resumed_from["epoch"] == 1
    assert_same_weights(model_of(tmp_path / "ckpt")["model"], one_process["checkpoint"]["model"])


@pytest.mark.slow
def test_a_rank_that_raises_fails_the_trial_naming_the_rank(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RANK_FAULT_MARKER", str(tmp_path / "marker"))
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the ranks import the task from tests/
    config = write_config(tmp_path, task="tests.helpers.rank_faults:make_task")
    run = group_run(
        config,
        DirectoryCheckpointStore(tmp_path / "c"),
        params={**PARAMS, "fault": "raise", "fault_rank": 1},
    )
    started = time.monotonic()
    outcome = run_trial_group(run, devices=["cpu", "cpu"], collective_timeout_s=600)
    assert outcome.status == "failed"
    assert outcome.reason.startswith("rank 1 of 2: RuntimeError: the task's own bug"), (
        outcome.reason
    )
    # Rank 0, waiting in a collective, was killed: the 600 s timeout played no part.
    assert time.monotonic() - started < 120


def test_the_devices_of_a_trial() -> None:
    # `--gpus all --gpus-per-trial K`: one worker per K GPUs; what is left over is not used.
    assert gpu_groups(8, 2) == ["cuda:0,1", "cuda:2,3", "cuda:4,5", "cuda:6,7"]
    assert gpu_groups(3, 2) == ["cuda:0,1"]
    with pytest.raises(ValueError, match="only 1 GPU"):
        gpu_groups(1, 2)
    # A worker's device, as the group of its trials' ranks.
    assert trial_devices("cpu", 2) == ["cpu", "cpu"]
    assert trial_devices("cuda:2", 2) == ["cuda:2", "cuda:3"]
    assert trial_devices("cuda:0,3", 2) == ["cuda:0", "cuda:3"]
    with pytest.raises(ValueError, match="names 3 GPUs"):
        trial_devices("cuda:0,1,2", 2)


@pytest.mark.slow
def test_a_killed_rank_hands_the_trial_back_and_the_worker_retries_it(
    pg_url: str, study_name: str, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    config = write_config(
        tmp_path,
        study_name,
        n_trials=2,
        task="tests.helpers.rank_faults:make_task",
        extra='fault = { type = "categorical", choices = ["kill"] }',
    )
    create_study(open_storage(pg_url), load_config(config))
    started = time.monotonic()
    done = hpsearch(
        "worker",
        "--study",
        study_name,
        "--device",
        "cpu",
        "--gpus-per-trial",
        "2",
        "--grace-s",
        "5",
        cwd=tmp_path,
        env={
            "HPSEARCH_STORAGE": pg_url,
            "HPSEARCH_COLLECTIVE_TIMEOUT_S": "600",
            "RANK_FAULT_MARKER": str(marker),
            "OMP_NUM_THREADS": "2",
        },
        timeout=300,
    )
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert marker.read_text() == "kill"  # rank 1 of the first attempt killed itself
    assert "rank 1 of 2 was killed by SIGKILL; handed back for another worker" in done.stderr
    # Two trials of ~10 s each and one killed attempt; rank 0, left waiting in a collective
    # with a 600 s timeout, was killed by its launcher at once.
    assert took < 200, done.stderr
    study = optuna.load_study(study_name=study_name, storage=pg_url)
    trials = study.get_trials(deepcopy=False)
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"]
    retried = trials[0]
    attempts = retried.system_attrs["hpsearch:failed_attempts"]
    assert [a["how"] for a in attempts] == ["rank 1 of 2 was killed by SIGKILL"]
    for trial in trials:
        ddp = trial.user_attrs["data_parallel"]
        assert ddp["ranks"] == 2 and ddp["per_rank_micro_batch"] == 32, json.dumps(ddp)


def test_a_bad_gpus_per_trial_is_one_line_and_exit_2(
    pg_url: str, study_name: str, tmp_path: Path
) -> None:
    create_study(open_storage(pg_url), load_config(write_config(tmp_path, study_name)))
    env = {"HPSEARCH_STORAGE": pg_url}
    for flags, says in [
        (["--gpus-per-trial", "0"], "--gpus-per-trial: must be >= 1, got 0"),
        (["--device", "cuda:0,1,2", "--gpus-per-trial", "2"], "names 3 GPUs"),
    ]:
        done = hpsearch("worker", "--study", study_name, *flags, cwd=tmp_path, env=env)
        assert done.returncode == 2, done.stderr
        assert says in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    # No worker registered: the flags were refused before anything was written.
    registered = query(
        pg_url,
        "SELECT count(*) FROM hpsearch.workers w JOIN studies s ON s.study_id = w.study_id "
        "WHERE s.study_name = :name",
        name=study_name,
    )
    assert registered[0][0] == 0


@pytest.mark.slow
def test_sigterm_checkpoints_both_ranks_and_one_process_finishes_the_trial(
    pg_url: str, study_name: str, tmp_path: Path
) -> None:
    epochs = 6
    config = write_config(tmp_path, study_name)
    config.write_text(config.read_text().replace("epochs = 2", f"epochs = {epochs}"))
    create_study(open_storage(pg_url), load_config(config))
    first = WorkerProcess(
        pg_url, study_name, tmp_path, grace_s=5, name="two-ranks", extra=("--gpus-per-trial", "2")
    )
    try:
        wait_for(lambda: reported_epochs(pg_url, study_name, 0) >= 1, 180, "epoch 1", [first])
        signalled = time.monotonic()
        first.signal(signal.SIGTERM)  # the worker's process group: the ranks have their own
        assert first.wait(60) == 0, first.log()
        stopped_in = time.monotonic() - signalled
    finally:
        first.kill()
    assert stopped_in < 20, f"took {stopped_in:.1f} s to checkpoint and hand back"
    assert trial_states(pg_url, study_name) == {"WAITING": 1}, first.log()
    assert "handed back for another worker" in first.log()

    second = WorkerProcess(pg_url, study_name, tmp_path, grace_s=5, name="one-process")
    try:
        assert second.wait(180) == 0, second.log()
    finally:
        second.kill()
    trial = optuna.load_study(study_name=study_name, storage=pg_url).trials[0]
    assert trial.state.name == "COMPLETE"
    # The 2-rank checkpoint (in PostgreSQL) went on in one process, not from scratch.
    assert trial.user_attrs["resumed_from"]["epoch"] >= 1, trial.user_attrs
    assert trial.user_attrs["epochs_trained"] == epochs
    assert "data_parallel" not in trial.user_attrs
