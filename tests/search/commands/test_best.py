"""After the search, on both backends: `hpsearch best` (its params reused by `try`, its weights
loaded into the task's model), `hpsearch trials`, `export --to csv`, `try --trial/--best`; what a
finished study leaves behind (only the best trial's checkpoint) and what every trial records
(its provenance, paused ones included). One ASHA study with an epoch budget per backend, run by
the `hpsearch` program with two workers."""

from __future__ import annotations

import csv
import json
import shlex
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa
import torch

from search.db.storage import open_storage
from search.db.tables import artifacts
from search.study.studies import find_study
from tests.helpers.cli import hpsearch
from tests.helpers.configs import ASHA_STUDY
from tests.helpers.postgres import migrated
from tests.helpers.tiny_task import make_task

pytestmark = pytest.mark.slow  # each backend runs a whole ASHA study first (~10 s)


@dataclass(frozen=True)
class Finished:
    url: str
    name: str
    config: Path
    cwd: Path
    run_stdout: str
    run_stderr: str


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def finished(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Finished:
    """An ASHA study with an epoch budget, run to its end by two workers."""
    cwd = tmp_path_factory.mktemp(request.param)
    if request.param == "sqlite":
        url = migrated(f"sqlite:///{cwd / 'hpsearch.db'}")
    else:
        url = request.getfixturevalue("pg_url")
    name = f"after-{uuid.uuid4().hex[:6]}"
    config = cwd / "study.toml"
    config.write_text(ASHA_STUDY.format(name=name, direction="maximize"))
    done = hpsearch("run", str(config), "--workers", "2", "--storage", url, cwd=cwd)
    assert done.returncode == 0, done.stderr[-3000:]
    return Finished(url, name, config, cwd, done.stdout, done.stderr)


def _cli(f: Finished, *args: str) -> tuple[int, str, str]:
    done = hpsearch(*args, "--storage", f.url, cwd=f.cwd)
    return done.returncode, done.stdout, done.stderr


def _trials(f: Finished) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=f.name, storage=f.url).trials


def _best(f: Finished) -> optuna.trial.FrozenTrial:
    complete = [t for t in _trials(f) if t.state == optuna.trial.TrialState.COMPLETE]
    assert complete, "the study must have a complete trial for these tests"
    return max(complete, key=lambda t: (t.value, -t.number))


def test_best_says_the_best_complete_trial_in_every_form(finished: Finished) -> None:
    best = _best(finished)
    # Pruned trials (paused at a rung when the budget ran out) are never the best, even when
    # their last value is higher.
    code, out, err = _cli(finished, "best", "--study", finished.name, "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert (shown["number"], shown["value"], shown["params"]) == (
        best.number,
        best.value,
        best.params,
    )
    assert shown["epochs_trained"] == 9 and shown["hostname"] and shown["worker_id"]
    assert shown["started"] and shown["completed"] and shown["weights_kept"] is True

    code, out, _ = _cli(finished, "best", "--study", finished.name)
    assert code == 0
    assert out.startswith(f"study {finished.name}: best trial {best.number}  val_accuracy ")
    assert "epochs trained: 9" in out and f"by worker {shown['worker_id']}" in out

    code, out, _ = _cli(finished, "best", "--study", finished.name, "--format", "toml")
    import tomllib

    assert code == 0 and tomllib.loads(out) == {"params": best.params}

    code, flags, _ = _cli(finished, "best", "--study", finished.name, "--format", "flags")
    assert code == 0
    # The flags as they are, for `try`: it trains exactly those params.
    tried = hpsearch(
        "try", str(finished.config), *shlex.split(flags), "--epochs", "1", cwd=finished.cwd
    )
    assert tried.returncode == 0, tried.stderr[-2000:]
    again = hpsearch(
        "try", str(finished.config), "--best", finished.name, "--storage", finished.url,
        "--epochs", "1", cwd=finished.cwd,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.splitlines()[0] == tried.stdout.splitlines()[0]  # the same params
    assert f"trial {best.number} of study {finished.name!r} (complete" in again.stderr


def test_best_weights_are_the_best_trials_final_model(finished: Finished) -> None:
    best = _best(finished)
    target = finished.cwd / "model.pt"
    code, out, err = _cli(finished, "best", "--study", finished.name, "--weights", str(target))
    assert code == 0, err
    assert f"trial {best.number}'s final weights" in out
    task = make_task(best.params)
    task.model.load_state_dict(torch.load(target, weights_only=True))  # strict
    task.model.eval()
    x, y = (torch.stack(column) for column in zip(*task.val_set, strict=True))
    with torch.no_grad():
        # The weights it ended with score the trial's value on the validation set.
        assert task.metric_fn(task.model(x), y) == pytest.approx(best.value)


def test_a_finished_study_keeps_the_best_and_the_paused_trials_checkpoints(
    finished: Finished,
) -> None:
    """The best trial's final weights stay (`best --weights`), and those of the trials the
    budget's end found paused at a rung (more budget promotes them); every other trial's is
    gone, from the artifact store as from the trials' attributes."""
    best = _best(finished)
    trials = _trials(finished)
    storage = open_storage(finished.url)
    try:
        study = find_study(storage, finished.name)
        assert study is not None
        if storage.is_postgres:
            with storage.autocommit() as conn:
                kept = conn.execute(
                    sa.select(artifacts.c.artifact_id)
                    .distinct()
                    .where(artifacts.c.artifact_id.startswith(study.uid))
                ).all()
            names = [row.artifact_id for row in kept]
        else:
            names = [p.name for p in (finished.cwd / "hpsearch.db.artifacts").iterdir()]
    finally:
        storage.close()
    numbers = sorted(int(name.split("-")[1]) for name in names)
    assert len(numbers) == len(set(numbers)), names  # one checkpoint per trial
    pointed = sorted(t.number for t in trials if "hpsearch:checkpoint" in t.system_attrs)
    assert numbers == pointed
    assert best.number in numbers
    for n in set(numbers) - {best.number}:
        assert trials[n].state.name == "PRUNED", n
        assert trials[n].system_attrs["hpsearch:ended_by"] == "budget", n
    paused = len(numbers) - 1
    assert f"{paused} paused or cut trial(s)' kept: a raised budget goes on with them" in (
        finished.run_stderr
    )
    assert "checkpoints: the best trial's final weights" in finished.run_stdout
    assert f"hpsearch trials --study {finished.name}" in finished.run_stdout


def test_every_trial_that_trained_records_its_provenance(finished: Finished) -> None:
    trials = _trials(finished)
    trained = [t for t in trials if t.intermediate_values]
    ended_by_budget = [t for t in trained if t.system_attrs.get("hpsearch:ended_by") == "budget"]
    assert ended_by_budget, "the budget should end paused trials"
    for t in trained:
        attrs = t.user_attrs
        assert attrs.get("hostname") and attrs.get("worker_id"), (t.number, attrs)
        assert attrs.get("epochs_trained") == max(t.intermediate_values), (t.number, attrs)
    # A trial promoted from a rung where it paused says from which epoch it went on.
    for t in trained:
        frm = t.user_attrs.get("resumed_from")
        if frm is not None:
            assert frm["trial"] == t.number and 1 <= frm["epoch"] < max(t.intermediate_values)


def test_trials_lists_every_trial(finished: Finished) -> None:
    trials = _trials(finished)
    code, out, err = _cli(finished, "trials", "--study", finished.name)
    assert code == 0, err
    lines = out.strip().splitlines()
    assert lines[0].split()[:6] == ["trial", "state", "val_accuracy", "epoch", "rung", "worker"]
    assert [int(line.split()[0]) for line in lines[1:]] == [t.number for t in trials]
    for line, t in zip(lines[1:], trials, strict=True):
        assert line.split()[1] == t.state.name.lower()

    code, out, _ = _cli(finished, "trials", "--study", finished.name, "--state", "pruned", "--json")
    listed = json.loads(out)
    pruned = [t for t in trials if t.state == optuna.trial.TrialState.PRUNED]
    assert [r["number"] for r in listed] == [t.number for t in pruned]
    assert all(r["params"] == t.params for r, t in zip(listed, pruned, strict=True))
    assert all(r["rung"] is not None and r["worker_id"] for r in listed)


def test_export_csv_one_row_per_trial(finished: Finished) -> None:
    target = finished.cwd / "trials.csv"
    code, _out, err = _cli(finished, "export", "--study", finished.name, "--to", "csv", str(target))
    assert code == 0, err
    trials = _trials(finished)
    with target.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["number"]) for r in rows] == [t.number for t in trials]
    for r, t in zip(rows, trials, strict=True):
        assert r["state"] == t.state.name
        assert float(r["value"]) == pytest.approx(t.value)
        assert float(r["params_lr"]) == t.params["lr"] and r["params_act"] == t.params["act"]
        assert r["worker_id"] and r["started"] and r["completed"] and r["epochs"]
    pandas = pytest.importorskip("pandas")
    table = pandas.read_csv(target)
    assert len(table) == len(trials) and table["value"].notna().all()


def test_bad_input_after_the_search(finished: Finished) -> None:
    """One line, exit 2, nothing written."""
    missing = finished.cwd / "no-such-dir" / "model.pt"
    cases = [
        (("best", "--study", "no-such-study"), "no hpsearch study named 'no-such-study'"),
        (("best", "--study", finished.name, "--weights", str(missing)), "no such directory"),
        (("best", "--study", finished.name, "--json", "--format", "toml"), "choose one"),
        (("trials", "--study", finished.name, "--state", "done"), "unknown state 'done'"),
        (("export", "--study", finished.name, "--to", "csv"), "give the CSV file"),
        (("export", "--study", finished.name, "--to", "csv", str(missing)), "not a file"),
        (("try", str(finished.config), "--trial", f"{finished.name}:999"), "has no trial 999"),
        (("try", str(finished.config), "--trial", finished.name), "expected STUDY:N"),
        (
            ("try", str(finished.config), "--best", finished.name, "--set", "lr=5"),
            "--set lr=5: outside space.lr",
        ),
    ]
    for args, expected in cases:
        code, _out, err = _cli(finished, *args)
        assert code == 2, (args, err)
        lines = err.strip().splitlines()
        assert expected in lines[-1] and lines[-1].startswith("hpsearch: error: "), (args, err)
        assert "Traceback" not in err
    assert not missing.parent.exists()


def test_best_of_a_study_without_a_complete_trial_is_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "study.toml"
    config.write_text(ASHA_STUDY.format(name="fresh", direction="minimize"))
    assert hpsearch("create", str(config), cwd=tmp_path).returncode == 0
    done = hpsearch("best", "--study", "fresh", "--weights", "w.pt", cwd=tmp_path)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("hpsearch: error: study 'fresh' has no complete trial yet ("), line
    assert not (tmp_path / "w.pt").exists()


@pytest.fixture(autouse=True)
def _no_stray_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for key in ("HPSEARCH_STORAGE", "HPSEARCH_ARTIFACTS"):
        monkeypatch.delenv(key, raising=False)
    yield
