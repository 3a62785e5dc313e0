"""`hpsearch slurm --submit` on a real one-node Slurm (tests/helpers/slurm_cluster.py), CPU-only,
on PostgreSQL: a 3-task job array finishes exactly n_trials; `scancel --signal=TERM` on one
task, the time limit of another and the preemption of the third make their workers checkpoint
and hand their trials back; the preempted task is requeued and resumes all three.

The trials train `held_task`, slow while a file exists: Slurm checks time limits every 30 s,
so the time-limited trial must still be running whenever that check comes; once the hand-backs
are seen the file goes and the rest trains in moments. Then the third task is preempted by a
job of a higher partition: it hands its trial back too, requeues itself, and once it runs again
its new worker finishes all three trials, each from its checkpoint.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import optuna
import pytest

from search.db.storage import open_storage
from search.study.parse_config import load_config
from search.study.studies import create_study
from tests.helpers.cli import hpsearch
from tests.helpers.processes import query, wait_for
from tests.helpers.slurm_cluster import slurm_cluster

pytestmark = pytest.mark.slow

EPOCHS = 30
"""Epochs per trial: held, about 80 s (2.6 s an epoch); none may finish before the hand-backs."""

CONFIG = """
[study]
name = "{name}"
direction = "maximize"
n_trials = 3
sampler = "random"
seed = 3

[pruner]
type = "none"

[task]
name = "tests.helpers.held_task:make_task"
epochs = {epochs}

[space]
lr = {{ type = "float", low = 1e-2, high = 1e-1, log = true }}
batch_size = {{ type = "categorical", choices = [16] }}
"""


def running_by_task(url: str, study: str) -> dict[str, tuple[int, int]]:
    """Array task id -> (trial number, epoch) of each running trial's worker."""
    rows = query(
        url,
        "SELECT t.number, l.epoch, w.launched_by FROM trials t "
        "JOIN studies s USING (study_id) JOIN hpsearch.trial_leases l USING (trial_id) "
        "JOIN hpsearch.workers w ON w.worker_id = l.worker_id "
        "WHERE s.study_name = :n AND t.state = 'RUNNING'",
        n=study,
    )
    return {json.loads(by)["array_task_id"]: (number, epoch) for number, epoch, by in rows}


def in_queue(env: dict[str, str], job: str) -> set[str]:
    """The array tasks of `job` that Slurm still runs (or holds), e.g. {"0", "2"}."""
    done = subprocess.run(
        ["squeue", "-h", "-j", job, "-o", "%K"], env=env, capture_output=True, text=True
    )
    return set(done.stdout.split())


def test_a_job_array_finishes_the_study_and_resumes_what_slurm_stopped(
    pg_url: str, study_name: str, tmp_path: Path
) -> None:
    config = tmp_path / "study.toml"
    config.write_text(CONFIG.format(name=study_name, epochs=EPOCHS))
    create_study(open_storage(pg_url), load_config(config))
    hold = tmp_path / "hold"
    hold.touch()
    logs = tmp_path / "logs"
    logs.mkdir()
    started = time.monotonic()
    with slurm_cluster() as env:
        submit = hpsearch(
            *("slurm", "--study", study_name, "--tasks", "3", "--gpus-per-task", "0"),
            *("--time", "10", "--grace", "60", "--output", str(logs), "--submit"),
            cwd=tmp_path,
            env={
                **env,
                "HPSEARCH_STORAGE": pg_url,
                "HELD_TASK_FILE": str(hold),
                "OMP_NUM_THREADS": "1",
                "PYTHONUNBUFFERED": "1",
            },
        )
        assert submit.returncode == 0, submit.stderr
        job = re.search(r"submitted job array (\d+)", submit.stdout)[1]

        def task_logs() -> str:
            return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in logs.glob("*"))

        def all_mid_trial() -> dict[str, tuple[int, int]] | None:
            running = running_by_task(pg_url, study_name)
            ready = set(running) == {"0", "1", "2"} and all(e >= 1 for _, e in running.values())
            return running if ready else None

        try:
            running = wait_for(all_mid_trial, 90, "three tasks mid-trial")
            mid_trial_s = time.monotonic() - started
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{task_logs()}") from None
        stopped_trial, limited_trial, preempted_trial = (running[t][0] for t in "120")

        # Task 2: its time limit becomes 1 minute; Slurm sends SIGTERM --grace 60 s before,
        # at its next time-limit check (every 30 s). Meanwhile, task 1: a polite stop, as a
        # user (or a preemption script) sends it.
        limited_at = time.monotonic()
        subprocess.run(["scontrol", "update", f"JobId={job}_2", "TimeLimit=1"], env=env, check=True)
        subprocess.run(["scancel", "--signal=TERM", f"{job}_1"], env=env, check=True)
        wait_for(lambda: "1" not in in_queue(env, job), 30, "task 1 to end")
        wait_for(lambda: "2" not in in_queue(env, job), 75, "task 2's time-limit SIGTERM")
        signal_after_s = time.monotonic() - limited_at
        states = {
            number: state
            for number, state in query(
                pg_url,
                "SELECT t.number, t.state FROM trials t JOIN studies s USING (study_id) "
                "WHERE s.study_name = :n",
                n=study_name,
            )
        }
        # Both handed back while held (not finished): task 0 is still on its own trial.
        assert states[stopped_trial] == states[limited_trial] == "WAITING", (
            states,
            task_logs(),
        )
        # Task 0: preempted by a job of the urgent partition that needs the whole node. Its
        # worker hands back at once; the task requeues itself and runs again after that job.
        subprocess.run(
            ["sbatch", "-p", "urgent", "--exclusive", "-o", "/dev/null", "--wrap", "sleep 1"],
            env=env,
            check=True,
            capture_output=True,
        )

        def restarted_worker() -> bool:
            return bool(
                query(
                    pg_url,
                    "SELECT 1 FROM hpsearch.workers w JOIN studies s USING (study_id) "
                    'WHERE s.study_name = :n AND w.launched_by LIKE \'%"restart_count": "1"%\'',
                    n=study_name,
                )
            )

        preempted_at = time.monotonic()
        wait_for(restarted_worker, 60, "task 0 requeued after preemption, and its new worker")
        back_after_s = time.monotonic() - preempted_at
        hold.unlink()  # the rest trains in moments
        wait_for(lambda: not in_queue(env, job), 90, "task 0 to finish the study")
        logs_by_task = {
            t: (logs / f"hpsearch-{study_name}-{job}_{t}.out").read_text() for t in "012"
        }
        scontrol = {
            t: subprocess.run(
                ["scontrol", "show", "job", f"{job}_{t}"], env=env, capture_output=True, text=True
            ).stdout
            for t in "02"
        }
    elapsed = time.monotonic() - started

    for t in "012":
        assert "checkpointed and handed back for another worker" in logs_by_task[t], logs_by_task[t]
        assert re.search(r"worker \S+ leaves \(SIGTERM\)", logs_by_task[t]), logs_by_task[t]
    assert "preempted: requeueing" in logs_by_task["0"], logs_by_task["0"]
    assert "TimeLimit=00:01:00" in scontrol["2"] and "JobState=COMPLETED" in scontrol["2"]
    assert "Restarts=1" in scontrol["0"] and "JobState=COMPLETED" in scontrol["0"]

    study = optuna.load_study(study_name=study_name, storage=pg_url)
    assert sorted(t.number for t in study.trials) == [0, 1, 2]  # exactly n_trials
    assert all(t.state.name == "COMPLETE" for t in study.trials)

    fleet = hpsearch(
        "workers",
        "--study",
        study_name,
        "--all",
        "--json",
        cwd=tmp_path,
        env={"HPSEARCH_STORAGE": pg_url},
    )
    assert fleet.returncode == 0, fleet.stderr
    workers = {
        (w["launched_by"]["array_task_id"], w["launched_by"].get("restart_count", "0")): w
        for w in json.loads(fleet.stdout)["workers"]
    }
    assert sorted(workers) == [("0", "0"), ("0", "1"), ("1", "0"), ("2", "0")]
    assert {w["launched_by"]["array_job_id"] for w in workers.values()} == {job}
    assert {k: w["stop_reason"] for k, w in workers.items()} == {
        ("0", "0"): "SIGTERM",  # preempted
        ("1", "0"): "SIGTERM",  # scancel --signal=TERM
        ("2", "0"): "SIGTERM",  # the time limit's --signal
        ("0", "1"): "done",  # the requeued task 0 finished the study
    }

    finisher = workers[("0", "1")]
    by_number = {t.number: t for t in study.trials}
    for number, stopped in (
        (stopped_trial, ("1", "0")),
        (limited_trial, ("2", "0")),
        (preempted_trial, ("0", "0")),
    ):
        trial = by_number[number]
        resumed = trial.user_attrs["resumed_from"]
        # Continued from the stopped worker's checkpoint, not from scratch.
        assert resumed["worker_id"] == workers[stopped]["worker_id"], (resumed, workers)
        assert resumed["epoch"] >= 1, resumed
        assert trial.user_attrs["worker_id"] == finisher["worker_id"]
        assert trial.user_attrs["launched_by"] == finisher["launched_by"]
        assert trial.user_attrs["epochs_trained"] == EPOCHS
        assert sorted(trial.intermediate_values) == list(range(1, EPOCHS + 1))
    print(
        f"Slurm test: {elapsed:.1f} s; time-limit SIGTERM {signal_after_s:.1f} s after the "
        f"update; all mid-trial after {mid_trial_s:.1f} s; preempted task back with a new "
        f"worker after {back_after_s:.1f} s"
    )


def test_a_gpu_array_task_gets_its_gpus_and_runs_the_worker_on_all_of_them(
    pg_url: str, study_name: str, tmp_path: Path
) -> None:
    """The GPU path of the script through a real sbatch and srun: --gres=gpu:2 is granted (the
    cluster's two GPUs are make-believe), and the worker started with --gpus all finds that
    torch sees no GPU: one line, exit 2, which Slurm records as the task's exit code."""
    config = tmp_path / "study.toml"
    config.write_text(CONFIG.format(name=study_name, epochs=2))
    create_study(open_storage(pg_url), load_config(config))
    logs = tmp_path / "logs"
    logs.mkdir()
    with slurm_cluster() as env:
        submit = hpsearch(
            *("slurm", "--study", study_name, "--tasks", "1", "--gpus-per-task", "2"),
            *("--time", "5", "--grace", "60", "--output", str(logs), "--submit"),
            *("--setup", 'echo "visible: $CUDA_VISIBLE_DEVICES"'),
            cwd=tmp_path,
            env={**env, "HPSEARCH_STORAGE": pg_url, "CUDA_VISIBLE_DEVICES": ""},
        )
        assert submit.returncode == 0, submit.stderr
        job = re.search(r"submitted job array (\d+)", submit.stdout)[1]
        wait_for(lambda: not in_queue(env, job), 60, "the GPU task to end")
        log = (logs / f"hpsearch-{study_name}-{job}_0.out").read_text()
        scontrol = subprocess.run(
            ["scontrol", "show", "job", f"{job}_0"], env=env, capture_output=True, text=True
        ).stdout
    assert "visible: 0,1" in log, log  # Slurm granted both GPUs to the task
    assert "--gpus all: no GPU is visible" in log, log
    assert "ExitCode=2:0" in scontrol, scontrol
    assert "Traceback" not in log
