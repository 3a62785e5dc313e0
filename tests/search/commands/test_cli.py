"""The `hpsearch` command line, run as users run it: real processes, real databases."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa

from search.pruning.pruners import HyperbandPruner
from tests.helpers import REPO
from tests.helpers.cli import cli_on_a_terminal, count_studies, hpsearch
from tests.helpers.configs import write_config

PROVENANCE = {
    "hostname",
    "worker_id",
    "device_name",
    "precision",
    "torch_version",
    "cuda_version",
    "git_commit",
    "git_dirty",
    "data_fingerprint",
    "epochs_trained",
    "wall_seconds",
    "peak_memory_bytes",
}


def _name_whose_first_trials_share_a_bracket(base: str, n: int) -> str:
    """A study name (`base` and a suffix) whose trials 0..n-1 are all in Hyperband's most
    aggressive bracket under `SMALL`'s pruner: Optuna draws a trial's bracket from a hash of the
    study name and the trial number, so a name drawn at random puts 0-8 of 10 trials where
    they can be pruned."""
    pruner = HyperbandPruner(min_resource=1, max_resource=4, reduction_factor=2)

    def first_trials_share(name: str) -> bool:
        study = optuna.create_study(study_name=name)
        return all(pruner.bracket_of(study, number) == 0 for number in range(n))

    return next(filter(first_trials_share, (f"{base}-{i}" for i in itertools.count())))


@pytest.mark.slow
def test_run_with_two_workers_on_postgres(pg_url: str, study_name: str, tmp_path: Path) -> None:
    # Trials 0 and 1 (good) run first, one on each worker; trial 2 (a learning rate that
    # learns nothing in an epoch) starts when one of them has ended, so it reaches the first
    # rung behind a better value of its bracket, recorded by the other worker: it is pruned
    # there, whatever the timing of the two workers.
    study_name = _name_whose_first_trials_share_a_bracket(study_name, 3)
    config = write_config(tmp_path, study_name, n_trials=10)
    good = "[[study.enqueue]]\nlr = 0.05\nwidth = 24\nbatch_size = 64\n"
    bad = "[[study.enqueue]]\nlr = 0.0001\nwidth = 4\nbatch_size = 128\n"
    config.write_text(config.read_text() + good + good + bad)
    done = hpsearch("run", str(config), "--workers", "2", "--storage", pg_url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "best: trial" in done.stdout
    assert "started 2 workers" in done.stderr

    status = hpsearch("status", "--study", study_name, "--json", "--storage", pg_url, cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    reported = json.loads(status.stdout)

    # Plain Optuna reads the same study, and agrees with `status --json`.
    study = optuna.load_study(study_name=study_name, storage=pg_url)
    states = Counter(t.state.name for t in study.trials)
    assert len(study.trials) == 10
    assert reported["n_trials"] == 10
    assert (reported["complete"], reported["pruned"], reported["failed"]) == (
        states["COMPLETE"],
        states["PRUNED"],
        states["FAIL"],
    )
    assert reported["running"] == reported["waiting"] == 0
    assert states["COMPLETE"] >= 1 and states["PRUNED"] >= 1 and states["FAIL"] == 0
    assert study.trials[2].state.name == "PRUNED"
    best = study.best_trial
    assert reported["best"] == {"number": best.number, "value": best.value, "params": best.params}
    assert 0.5 < best.value <= 1.0  # digits accuracy: it really trained

    for trial in study.trials:
        assert set(trial.user_attrs) >= PROVENANCE, sorted(PROVENANCE - set(trial.user_attrs))
        epochs = trial.user_attrs["epochs_trained"]
        assert epochs == len(trial.intermediate_values) == max(trial.intermediate_values)
        if trial.state.name == "PRUNED":
            assert epochs < 4
    assert len({t.user_attrs["worker_id"] for t in study.trials}) == 2
    # Finished trials leave no checkpoint behind (the default), but the best trial's.
    uid = study._storage.get_study_system_attrs(study._study_id)["hpsearch:uid"]
    engine = sa.create_engine(pg_url)
    with engine.connect() as conn:
        left = conn.execute(
            sa.text(
                "SELECT DISTINCT artifact_id FROM hpsearch.artifacts WHERE artifact_id LIKE :p"
            ),
            {"p": f"{uid}-%"},
        ).all()
    assert [row.artifact_id.split("-")[1] for row in left] == [str(best.number)]
    engine.dispose()


@pytest.mark.slow
def test_status_table_shows_counts_and_best(pg_url: str, study_name: str, tmp_path: Path) -> None:
    config = write_config(tmp_path, study_name, n_trials=2)
    assert hpsearch("run", str(config), "--storage", pg_url, cwd=tmp_path).returncode == 0
    table = hpsearch("status", "--study", study_name, "--storage", pg_url, cwd=tmp_path)
    assert table.returncode == 0
    assert f"study {study_name}: 2/2 finished" in table.stdout
    assert "best: trial" in table.stdout


@pytest.mark.slow
def test_main_job_runs_on_the_sqlite_default(tmp_path: Path) -> None:
    """README's first command: `hpsearch run` with no storage settings at all."""
    config = write_config(tmp_path, "readme", n_trials=2)
    done = hpsearch("run", str(config), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "hpsearch.db").exists()
    # It ends saying what happened, where the results are and what to run next.
    lines = done.stdout.strip().splitlines()
    assert lines[-4].startswith("study 'readme' finished: 2/2 trials ("), done.stdout
    assert lines[-3].startswith("  best: trial ")
    assert lines[-2].startswith(
        f"results: sqlite:///{tmp_path}/hpsearch.db; checkpoints: the best trial's final "
        "weights (hpsearch best --weights), those of trials paused at a rung or cut by the "
        "budget when the study ended (a raised budget goes on with them) and reports, in "
        f"{tmp_path}/hpsearch.db.artifacts/"
    ) or lines[-2].startswith("results: sqlite:///hpsearch.db; checkpoints: the best"), lines[-2]
    assert lines[-1].startswith("next: hpsearch trials --study readme (every trial) | ")
    assert "hpsearch best --study readme (" in lines[-1]
    assert "hpsearch dashboard (" in lines[-1] and "hpsearch compare CONFIG" in lines[-1]
    # Nothing left behind but the best trial's checkpoint.
    assert len(list((tmp_path / "hpsearch.db.artifacts").iterdir())) == 1
    again = hpsearch("run", str(config), cwd=tmp_path)  # the study is done: nothing to do
    assert again.returncode == 0 and "best: trial" in again.stdout
    assert "study 'readme' was already finished: 2/2 trials" in again.stdout
    assert "nothing was run: to search again, give the config a new study name" in again.stdout
    assert "trial 0" not in again.stderr  # no trial ran
    assert (
        len(
            optuna.load_study(
                study_name="readme", storage=f"sqlite:///{tmp_path}/hpsearch.db"
            ).trials
        )
        == 2
    )


RAISING_TASK = """
import dataclasses
from tests.helpers.tiny_task import make_task

def _labels_from_disk(params):
    raise ValueError(f"label file is missing column {params['column']!r}")

def make(params):
    def loss_fn(outputs, targets):
        _labels_from_disk(params)
    return dataclasses.replace(make_task(params), loss_fn=loss_fn)
"""


@pytest.mark.slow
def test_a_trial_whose_task_raises_fails_with_its_traceback_in_the_log(tmp_path: Path) -> None:
    """The study records the one-line reason; the worker's log has the whole traceback, so the
    user sees which line of their task raised without running `hpsearch try`."""
    (tmp_path / "raising_task.py").write_text(RAISING_TASK)
    (tmp_path / "study.toml").write_text(
        '[study]\nname = "raises"\nn_trials = 2\nsampler = "random"\n'
        '[task]\nname = "raising_task:make"\nepochs = 2\n'
        '[space]\ncolumn = { type = "categorical", choices = ["y"] }\n'
    )
    done = hpsearch("run", "study.toml", cwd=tmp_path, env={"PYTHONPATH": f"{tmp_path}:{REPO}"})
    study = optuna.load_study(study_name="raises", storage=f"sqlite:///{tmp_path}/hpsearch.db")
    assert [t.state.name for t in study.trials] == ["FAIL", "FAIL"], done.stderr[-3000:]
    reason = "ValueError: label file is missing column 'y'"
    assert all(t.system_attrs["fail_reason"] == reason for t in study.trials)
    for number in (0, 1):
        logged = done.stderr.split(f"trial {number} raised:\n", 1)[1]
        assert logged.startswith("Traceback (most recent call last):"), done.stderr[-3000:]
        assert 'raising_task.py", line 6, in _labels_from_disk' in logged.split("\n\n")[0]


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("missing-file", "nope.toml: cannot read config file"),
        ("bad-toml", "not valid TOML"),
        ("unknown-sampler", 'study.sampler: unknown value "bayes"'),
        ("log-low-zero", "space.lr: log = true needs low > 0, got low = 0"),
        ("missing-task", "[task] section is missing"),
        (
            "unimportable-task",
            "task.name: task 'nosuch.module:make_task': no module named 'nosuch'",
        ),
        ("bad-storage-url", "bad storage URL 'mysql://ml:***@db/hp'"),
        ("unreachable-database", "cannot reach the database at postgresql+psycopg://ml:***@"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(
    case: str, expected: str, pg_url: str, tmp_path: Path
) -> None:
    config = write_config(tmp_path, "bad")
    text = config.read_text()
    storage = f"sqlite:///{tmp_path}/study.db"
    if case == "missing-file":
        config = tmp_path / "nope.toml"
    elif case == "bad-toml":
        config.write_text("[study\n")
    elif case == "unknown-sampler":
        config.write_text(text.replace('sampler = "random"', 'sampler = "bayes"'))
    elif case == "log-low-zero":
        config.write_text(text.replace("low = 1e-4", "low = 0"))
    elif case == "missing-task":
        config.write_text(text.replace('[task]\nname = "digits"\nepochs = 4\n', ""))
    elif case == "unimportable-task":
        config.write_text(text.replace('name = "digits"', 'name = "nosuch.module:make_task"'))
    elif case == "bad-storage-url":
        storage = "mysql://ml:s3cret@db/hp"
    elif case == "unreachable-database":
        storage = "postgresql://ml:s3cret@127.0.0.1:1/hp"
    studies_before = count_studies(pg_url)
    for command in ("run", "create"):
        result = hpsearch(command, str(config), "--storage", storage, cwd=tmp_path)
        assert result.returncode == 2, (command, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0], result.stderr
        assert "s3cret" not in result.stderr + result.stdout
    assert not (tmp_path / "study.db").exists()
    assert not (tmp_path / "hpsearch.db").exists()
    assert count_studies(pg_url) == studies_before


@pytest.mark.slow
def test_unknown_study_and_changed_config_are_bad_input(
    pg_url: str, study_name: str, tmp_path: Path
) -> None:
    worker = hpsearch("worker", "--study", "no-such-study", "--storage", pg_url, cwd=tmp_path)
    assert worker.returncode == 2 and "no hpsearch study named 'no-such-study'" in worker.stderr
    missing_db = hpsearch(
        "status", "--study", "x", "--storage", f"sqlite:///{tmp_path}/typo.db", cwd=tmp_path
    )
    assert missing_db.returncode == 2 and "no study database at" in missing_db.stderr
    assert not (tmp_path / "typo.db").exists()

    config = write_config(tmp_path, study_name, n_trials=3)
    assert hpsearch("create", str(config), "--storage", pg_url, cwd=tmp_path).returncode == 0
    # Random search: `create` queues the first trials, so workers start at once.
    queued = optuna.load_study(study_name=study_name, storage=pg_url).trials
    assert [(t.number, t.state.name) for t in queued] == [
        (0, "WAITING"),
        (1, "WAITING"),
        (2, "WAITING"),
    ]
    same = hpsearch("create", str(config), "--storage", pg_url, cwd=tmp_path)
    assert same.returncode == 0 and "already exists, same config" in same.stdout
    config.write_text(config.read_text().replace("seed = 1", "seed = 2"))
    changed = hpsearch("create", str(config), "--storage", pg_url, cwd=tmp_path)
    assert changed.returncode == 2
    assert "already exists with a different config (study.seed: 1 -> 2)" in changed.stderr
    assert optuna.load_study(study_name=study_name, storage=pg_url).trials == queued
    # Fewer trials than the study has is refused too (more would continue the study).
    config.write_text(
        config.read_text().replace("seed = 2", "seed = 1").replace("n_trials = 3", "n_trials = 2")
    )
    fewer = hpsearch("create", str(config), "--storage", pg_url, cwd=tmp_path)
    assert fewer.returncode == 2
    assert fewer.stderr.strip().splitlines() == [
        f"hpsearch: error: study {study_name!r}: study.n_trials 3 -> 2 is below the 3 trials "
        "the study already has"
    ]
    assert optuna.load_study(study_name=study_name, storage=pg_url).trials == queued

    # `--gpus all` where no GPU is visible: bad input, not a silent CPU worker.
    no_gpu = hpsearch(
        "worker", "--study", study_name, "--gpus", "all", "--storage", pg_url,
        cwd=tmp_path, env={"CUDA_VISIBLE_DEVICES": ""},
    )  # fmt: skip
    assert no_gpu.returncode == 2, no_gpu.stderr
    assert no_gpu.stderr.strip().splitlines() == [
        "hpsearch: error: --gpus all: no GPU is visible (CUDA_VISIBLE_DEVICES, drivers?)"
    ]
    assert optuna.load_study(study_name=study_name, storage=pg_url).trials == queued


@pytest.mark.slow
def test_live_progress_on_a_terminal(study_name: str, tmp_path: Path) -> None:
    config = write_config(tmp_path, study_name, n_trials=4)
    code, text = cli_on_a_terminal(["run", str(config)], tmp_path)
    assert code == 0, text[-2000:]
    # One worker: its line shows the trial, the epoch, the score and the best so far.
    assert re.search(
        r"\r\x1b\[K\[\S+\] trial \d+: epoch \d/4 val_accuracy 0\.\d{4} \| best "
        r"0\.\d+ \(trial \d+\)",
        text,
    ), text[-2000:]

    config = write_config(tmp_path, f"{study_name}-2", n_trials=4)
    code, text = cli_on_a_terminal(["run", str(config), "--workers", "2"], tmp_path)
    assert code == 0, text[-2000:]
    # Two workers: one line for the study, redrawn under the workers' log lines.
    assert re.search(rf"\r\x1b\[K{study_name}-2: \d/4 finished \(\d pruned\), \d running", text)
    assert not re.search(r"\] trial \d+: epoch", text)  # the workers themselves draw nothing


def test_every_command_says_what_it_does_and_its_exit_codes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from search.commands import main
    from search.commands.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert {"run", "worker", "status", "studies", "workers", "delete", "migrate"} <= set(
        sub.choices
    )
    for name in sub.choices:
        assert main([name, "--help"]) == 0
        text = capsys.readouterr().out
        usage, description = text.split("\n\n")[:2]
        assert usage.startswith(f"usage: hpsearch {name}"), name
        assert not description.lstrip().startswith(("-h", "options:")), (name, description)
        assert "exit codes: 0 " in " ".join(text.split()), name


def test_version(tmp_path: Path) -> None:
    import tomllib

    done = hpsearch("--version", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert done.stdout.strip() == f"hpsearch {version}"


def test_commands_that_train_nothing_never_load_torch(tmp_path: Path) -> None:
    """`hpsearch --help`, `studies` and `status` answer in about a second: importing torch
    (seconds) is for the commands that train."""
    code = (
        "import sys\n"
        "from search.commands import main\n"
        "for argv in (['--version'], ['studies', '--storage', 'sqlite:///h.db'],\n"
        "             ['status', '--study', 'none', '--storage', 'sqlite:///h.db']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]


_CUT_CONNECTION = """
import sqlalchemy as sa
from search.commands.cli import _setup_logging


class Cut:
    # A DBAPI connection the database cut in the middle of a pipeline (psycopg, CI): rolling
    # it back fails with an error SQLAlchemy does not take for a disconnect.
    def rollback(self):
        raise RuntimeError("cannot exit pipeline mode while busy")

    def close(self):
        pass


_setup_logging({verbose})
pool = sa.pool.QueuePool(Cut, pool_size=1)
pool.connect().close()  # returned to the pool: SQLAlchemy's pool rolls it back, and fails
print("returned")
"""


@pytest.mark.parametrize("verbose", [False, True])
def test_a_connection_the_pool_cannot_roll_back_prints_no_traceback(verbose: bool) -> None:
    """A worker whose database went away mid-statement says so in one line of its own; the
    traceback SQLAlchemy's pool logs as it fails to roll the cut connection back is shown only
    with --verbose (a CI run saw it in a worker's log when its database was renamed)."""
    done = subprocess.run(
        [sys.executable, "-c", _CUT_CONNECTION.format(verbose=verbose)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == "returned", done.stderr
    if verbose:
        assert "Exception during reset" in done.stderr and "Traceback" in done.stderr, done.stderr
    else:
        assert done.stderr == "", done.stderr
