"""`hpsearch slurm` without a cluster (the script it prints, the bad input it refuses), and a
worker that says which scheduler started it. The script run by a real Slurm: test_slurm.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import optuna
import pytest

from search.db.storage import open_storage
from search.study.parse_config import load_config
from search.study.studies import create_study
from search.worker.provenance import launched_by, launched_by_label
from search.worker.slurm_script import parse_slurm_time
from tests.helpers.cli import hpsearch
from tests.helpers.configs import write_config
from tests.helpers.processes import WorkerProcess


@pytest.fixture
def study(pg_url: str, study_name: str, tmp_path: Path) -> str:
    config = write_config(
        tmp_path, study_name, n_trials=1, task="tests.helpers.tiny_task:make_task"
    )
    create_study(open_storage(pg_url), load_config(config))
    return study_name


def sbatch_lines(script: str) -> list[str]:
    return [line.removeprefix("#SBATCH ") for line in script.splitlines() if "#SBATCH" in line]


def test_the_script_asks_slurm_for_gpus_sigterm_before_the_limit_and_requeue(
    pg_url: str, study: str, tmp_path: Path
) -> None:
    done = hpsearch(
        *("slurm", "--study", study, "--tasks", "8", "--gpus-per-task", "4"),
        *("--time", "1-00:00:00", "--grace", "600", "--partition", "gpu", "--mem", "200g"),
        *("--cpus-per-task", "32", "--output", str(tmp_path), "--sbatch=--account=ml"),
        *("--setup", "module load cuda/12"),
        cwd=tmp_path,
        env={"HPSEARCH_STORAGE": pg_url},
    )
    assert done.returncode == 0, done.stderr
    script = done.stdout
    options = sbatch_lines(script)
    for expected in (
        "--array=0-7",
        "--gres=gpu:4",
        "--time=1-00:00:00",
        "--signal=TERM@600",
        "--requeue",
        "--partition=gpu",
        "--mem=200G",
        "--cpus-per-task=32",
        f"--output={tmp_path}/hpsearch-{study}-%A_%a.out",
        "--account=ml",
    ):
        assert expected in options, (expected, options)
    (step,) = [line for line in script.splitlines() if line.startswith("srun ")]
    # The worker is the job step (srun), so --signal and scancel --signal reach it.
    assert step.startswith("srun --ntasks=1 --cpus-per-task=32 ")
    assert step.endswith(f"-m search worker --study {study} --gpus all || status=$?")
    assert 'scontrol requeue "$SLURM_JOB_ID"' in script  # a preempted task that handed back
    assert "module load cuda/12" in script
    # The URL is nowhere in the script: the job takes it from sbatch's environment.
    assert "postgresql" not in script and "127.0.0.1" not in script
    assert 'if [ -z "${HPSEARCH_STORAGE:-}" ]' in script


def test_a_cpu_only_array_and_the_url_from_a_private_file(
    pg_url: str, study: str, tmp_path: Path
) -> None:
    secret = tmp_path / "db-url"
    secret.write_text(pg_url + "\n")
    secret.chmod(0o644)
    args = ("slurm", "--study", study, "--tasks", "3", "--gpus-per-task", "0")
    done = hpsearch(*args, "--storage-file", str(secret), cwd=tmp_path)
    assert done.returncode == 2 and "chmod 600" in done.stderr, done.stderr
    assert done.stdout == ""
    secret.chmod(0o600)
    done = hpsearch(*args, "--storage-file", str(secret), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "--gres" not in done.stdout
    assert f"--study {study} --device cpu || status=$?" in done.stdout
    assert f'HPSEARCH_STORAGE="$(cat -- {secret})"' in done.stdout
    assert "postgresql" not in done.stdout


@pytest.mark.parametrize(
    ("extra", "env", "message"),
    [
        (("--study", "no-such-study"), {}, "no hpsearch study named 'no-such-study'"),
        ((), {"HPSEARCH_STORAGE": "postgresql://u:hunter2@127.0.0.1:1/x"}, "cannot reach"),
        (("--time", "10", "--grace", "600"), {}, "not shorter than the time limit"),
        (("--time", "2h"), {}, "--time: time limit '2h'"),
        (("--grace", "0"), {}, "--grace"),
        (("--output", "/no/such/dir"), {}, "no such directory"),
        (("--gpus-per-task", "3", "--gpus-per-trial", "2"), {}, "does not divide"),
        (("--mem", "lots"), {}, "--mem"),
        (("--artifacts", "/no/such/volume"), {}, "--artifacts /no/such/volume: no such directory"),
    ],
    ids=[
        "no-study",
        "unreachable",
        "grace-too-long",
        "time-format",
        "zero-grace",
        "output",
        "per-trial",
        "mem",
        "artifacts",
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_submitted(
    extra: tuple[str, ...],
    env: dict[str, str],
    message: str,
    pg_url: str,
    study: str,
    tmp_path: Path,
) -> None:
    # A fake sbatch on PATH records any call: nothing may be submitted.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(f"#!/bin/sh\ntouch {tmp_path}/submitted\necho 1\n")
    (bin_dir / "sbatch").chmod(0o755)
    args = ["slurm", "--study", study, "--tasks", "2", "--gpus-per-task", "1", "--submit"]
    for i in range(0, len(extra), 2):  # a flag given twice: the later one counts
        args += list(extra[i : i + 2])
    done = hpsearch(
        *args,
        cwd=tmp_path,
        env={"HPSEARCH_STORAGE": pg_url, "PATH": f"{bin_dir}:{os.environ['PATH']}", **env},
    )
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines
    assert "hunter2" not in done.stderr
    assert not (tmp_path / "submitted").exists()


def test_slurm_time_formats() -> None:
    assert [parse_slurm_time(t) for t in ("30", "5:30", "2:00:00", "1-0", "1-2:3", "0-0:0:45")] == [
        1800,
        330,
        7200,
        86400,
        86400 + 7200 + 180,
        45,
    ]
    for bad in ("", "1h", "-5", "0", "1:2:3:4"):
        with pytest.raises(ValueError):
            parse_slurm_time(bad)


def test_launched_by_reads_slurm_and_kubernetes_environments() -> None:
    assert launched_by({"PATH": "/bin"}) is None
    slurm = launched_by(
        {"SLURM_JOB_ID": "41", "SLURM_ARRAY_JOB_ID": "40", "SLURM_ARRAY_TASK_ID": "1"}
    )
    assert launched_by_label(slurm) == "slurm:40_1"
    assert launched_by_label(launched_by({"SLURM_JOB_ID": "7"})) == "slurm:7"
    pod = launched_by(
        {
            "KUBERNETES_SERVICE_HOST": "10.0.0.1",
            "HOSTNAME": "w-2-abcde",
            "JOB_COMPLETION_INDEX": "2",
        }
    )
    assert pod == {"scheduler": "kubernetes", "pod": "w-2-abcde", "job_completion_index": "2"}
    assert launched_by_label(pod) == "k8s:w-2-abcde"


@pytest.mark.slow
def test_a_worker_started_by_slurm_says_so_in_workers_and_in_its_trials(
    pg_url: str, study: str, tmp_path: Path
) -> None:
    slurm_env = {
        "SLURM_JOB_ID": "1239",
        "SLURM_ARRAY_JOB_ID": "1234",
        "SLURM_ARRAY_TASK_ID": "5",
        "SLURM_RESTART_COUNT": "1",
    }
    old = {k: os.environ.get(k) for k in slurm_env}
    os.environ.update(slurm_env)  # WorkerProcess passes this process's environment on
    try:
        worker = WorkerProcess(pg_url, study, tmp_path, grace_s=5, name="slurm-task")
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k)
            else:
                os.environ[k] = v
    try:
        assert worker.wait(120) == 0, worker.log()
    finally:
        worker.kill()
    expected = {
        "scheduler": "slurm",
        "job_id": "1239",
        "array_job_id": "1234",
        "array_task_id": "5",
        "restart_count": "1",
    }
    done = hpsearch(
        "workers",
        "--study",
        study,
        "--all",
        "--json",
        cwd=tmp_path,
        env={"HPSEARCH_STORAGE": pg_url},
    )
    assert done.returncode == 0, done.stderr
    (listed,) = json.loads(done.stdout)["workers"]
    assert listed["launched_by"] == expected
    done = hpsearch(
        "workers", "--study", study, "--all", cwd=tmp_path, env={"HPSEARCH_STORAGE": pg_url}
    )
    header, row, _ = done.stdout.strip().splitlines()
    assert "scheduler" in header.split() and "slurm:1234_5" in row.split()
    (trial,) = optuna.load_study(study_name=study, storage=pg_url).trials
    assert trial.user_attrs["launched_by"] == expected
    assert trial.user_attrs["worker_id"] == listed["worker_id"]


def test_submit_hands_sbatch_the_script_and_the_url_only_in_its_environment(
    pg_url: str, study: str, tmp_path: Path
) -> None:
    # The test server trusts 127.0.0.1, so a URL with a password still connects.
    with_password = pg_url.replace("postgres@", "postgres:hunter2@")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(
        "#!/bin/sh\n"
        f'echo "$@" > {tmp_path}/argv\n'
        f"cat > {tmp_path}/script\n"
        f'printf %s "$HPSEARCH_STORAGE" > {tmp_path}/url\n'
        "echo '4242;cluster'\n"
    )
    (bin_dir / "sbatch").chmod(0o755)
    done = hpsearch(
        *("slurm", "--study", study, "--tasks", "2", "--gpus-per-task", "1", "--submit"),
        "--storage",
        with_password,
        cwd=tmp_path,
        env={"PATH": f"{bin_dir}:{os.environ['PATH']}"},
    )
    assert done.returncode == 0, done.stderr
    assert "submitted job array 4242" in done.stdout
    assert "scancel --signal=TERM 4242" in done.stdout
    assert (tmp_path / "argv").read_text().split() == ["--parsable"]  # nothing else on argv
    script = (tmp_path / "script").read_text()
    assert "#SBATCH --array=0-1" in script and "--gpus all" in script
    assert (tmp_path / "url").read_text() == with_password  # the job's environment has it
    for shown in (script, done.stdout, done.stderr):
        assert "hunter2" not in shown
