"""`hpsearch compare` on real databases: the studies it runs, the report it writes, bad input."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.artifacts import get_all_artifact_meta

from search.commands import main
from search.compare.collect import RunResult, TrialPoint
from search.compare.plan import (
    CompareRequest,
    Strategy,
    grid_for_budget,
    parse_strategies,
    plan_compare,
)
from search.compare.plots import write_plots
from search.compare.report import report_blocks
from search.compare.run import prepare_studies
from search.compare.statistics import summarize
from search.db.storage import open_storage
from search.study.parse_config import parse_config
from search.worker.loop import Worker
from search.worker.trial import TrialOutcome, TrialRun
from tests.helpers import REPO
from tests.helpers.processes import query

TINY = """
[study]
name = "{name}"
n_trials = 4

[pruner]
type = "none"

[task]
name = "tests.helpers.tiny_task:make_task"
epochs = 2

[space]
lr = {{ type = "float", low = 1e-3, high = 1.0, log = true }}
dropout = {{ type = "float", low = 0.0, high = 0.2 }}
"""


def write_config(tmp_path: Path, name: str) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(TINY.format(name=name))
    return path


def space_config(name: str = "demo", **space: Any) -> Any:
    return parse_config(
        {
            "study": {"name": name},
            "task": {"name": "digits", "epochs": 3},
            "space": space
            or {
                "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
                "dropout": {"type": "float", "low": 0.0, "high": 0.5},
            },
        }
    )


def test_the_grid_fills_the_budget() -> None:
    config = space_config()
    assert [len(v) for v in grid_for_budget(config, 9).values()] == [3, 3]
    assert [len(v) for v in grid_for_budget(config, 10).values()] == [4, 3]  # 12, 10 run
    assert grid_for_budget(config, 4)["lr"] == pytest.approx([1e-4, 1e-1])
    with_choice = space_config(
        width={"type": "categorical", "choices": [8, 16, 32]},
        lr={"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
    )
    grid = grid_for_budget(with_choice, 9)
    assert grid["width"] == [8, 16, 32] and len(grid["lr"]) == 3
    # The stored grid study runs exactly the budget, on those values, with the repeat's seed.
    runs = plan_compare(config, parse_strategies("grid,random", "none", config), 10, 2)
    assert [r.name for r in runs] == [
        "demo-grid-r1",
        "demo-random-r1",
        "demo-grid-r2",
        "demo-random-r2",
    ]
    grid_run = runs[0].config
    assert grid_run.study.n_trials == 10 and grid_run.grid_size() == 12
    assert len({r.seed for r in runs}) == 4


@pytest.mark.slow
def test_compare_summary_is_what_the_studies_hold(
    pg_url: str, tmp_path: Path, study_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, study_name)
    out = tmp_path / "report"
    argv = ["compare", str(config), "--samplers", "grid,random", "--budget", "4"]
    argv += ["--out", str(out), "--storage", pg_url]
    # One repeat first, then two: the second run finds repeat 1 done and runs only repeat 2,
    # as a comparison stopped half-way is finished by running the same command again.
    assert main([*argv, "--repeats", "1"]) == 0
    first = query(
        pg_url,
        "SELECT count(*) FROM trials t JOIN studies s USING (study_id) WHERE s.study_name LIKE :n",
        n=f"{study_name}-%",
    )[0][0]
    assert first == 8
    capsys.readouterr()
    assert main([*argv, "--repeats", "2"]) == 0
    err = capsys.readouterr().err
    assert "grid repeat 1/2: 4/4 trials done" in err and "(already done)" in err

    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["strategies"]) == {"grid", "random"}
    for label, s in summary["strategies"].items():
        assert s["studies"] == [f"{study_name}-{label}-r1", f"{study_name}-{label}-r2"]
        for k, name in enumerate(s["studies"]):
            study = optuna.load_study(study_name=name, storage=pg_url)
            trials = study.get_trials()
            assert len(trials) == 4 and all(t.state.name == "COMPLETE" for t in trials)
            assert s["best_per_repeat"][k] == study.best_value
            assert s["epochs_trained"][k] == sum(len(t.intermediate_values) for t in trials) == 8
            for param in ("lr", "dropout"):
                assert s["distinct_values"][param][k] == len({t.params[param] for t in trials})
            # The report is attached to every compared study, once, for the dashboard.
            files = sorted(m.filename for m in get_all_artifact_meta(study))
            assert files == ["report.html", "summary.json"]
        assert s["mean"] == pytest.approx(sum(s["best_per_repeat"]) / 2)
    assert summary["strategies"]["grid"]["distinct_values"]["lr"] == [2, 2]  # a 2 x 2 grid
    assert summary["strategies"]["random"]["distinct_values"]["lr"] == [4, 4]
    # Two repeats cannot show a difference at 0.05: the report says so and names no winner,
    # but still says by how much the leader is ahead.
    (test,) = summary["tests"]
    (line,) = [c for c in summary["conclusions"] if "not significant with 2 repeats" in c]
    assert line.startswith(f"{test['leader']} ends ") and f"than {test['other']}" in line
    assert not any("beats" in c for c in summary["conclusions"])

    for name in (
        "report.md",
        "best_vs_trials.png",
        "best_vs_epochs.png",
        "final_bests.png",
        "score_vs_lr.png",
    ):
        assert (out / name).stat().st_size > 0
    page = (out / "report.html").read_text()
    # Self-contained: every image inline, nothing fetched from beside the file.
    assert page.count('src="data:image/png;base64,') == 4 and page.count("src=") == 4


@pytest.mark.slow
def test_compare_at_equal_epochs_with_a_pruner_that_pauses(
    storage_url: str, tmp_path: Path, study_name: str
) -> None:
    """--budget-epochs: every strategy trains the same epochs, pruned and paused trials'
    included; asha spends what it saves on more trials."""
    config = tmp_path / "tiny.toml"
    config.write_text(TINY.format(name=study_name).replace("epochs = 2", "epochs = 3"))
    out = tmp_path / "report"
    argv = ["compare", str(config), "--samplers", "random", "--pruners", "none,asha"]
    argv += ["--budget-epochs", "15", "--repeats", "1", "--out", str(out)]
    assert main([*argv, "--storage", storage_url]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["budget_epochs"] == 15
    trials = {}
    for label in ("random", "random-asha"):
        s = summary["strategies"][label]
        assert s["epochs_trained"] == [15]  # exactly the budget, never more
        (name,) = s["studies"]
        found = optuna.load_study(study_name=name, storage=storage_url).get_trials()
        assert {t.state.name for t in found} <= {"COMPLETE", "PRUNED"}
        trials[label] = len(found)
    assert trials["random"] == 5  # 15 epochs of 3-epoch trials
    assert trials["random-asha"] > trials["random"]
    assert "equal compute: a budget of 15 epochs" in (out / "report.md").read_text()


@pytest.mark.slow
def test_exactly_once_grid_with_16_workers(pg_url: str, study_name: str) -> None:
    """16 workers (threads, each with its own connections) race for a compare grid of 36
    points: 36 trials, every grid point once."""
    config = space_config(study_name)
    (run,) = plan_compare(config, [Strategy("grid")], 36, 1)
    storage = open_storage(pg_url)
    (ref,) = prepare_studies(storage, [run], ["compare"])
    storage.close()

    def quick(trial: TrialRun) -> TrialOutcome:
        trial.report(1, trial.params["lr"])
        return TrialOutcome(status="completed", value=trial.params["lr"])

    codes: list[int] = []

    def work() -> None:
        own = open_storage(pg_url)
        try:
            codes.append(Worker(own, ref, run_trial=quick, grace_s=30, progress=False).run())
        finally:
            own.close()

    threads = [threading.Thread(target=work) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert codes == [0] * 16
    rows = query(pg_url, "SELECT number FROM trials WHERE study_id = :s", s=ref.study_id)
    assert sorted(n for (n,) in rows) == list(range(36))
    trials = optuna.load_study(study_name=ref.name, storage=pg_url).get_trials()
    points = {(t.params["lr"], t.params["dropout"]) for t in trials}
    grid = run.config.grid_values()
    assert len(grid["lr"]) == len(grid["dropout"]) == 6
    assert points == {(a, b) for a in grid["lr"] for b in grid["dropout"]}


def _dump(path: Path) -> list[str]:
    """The database's content as SQL (the file's bytes change when SQLite checkpoints its
    write-ahead log, with no change in content)."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        return list(db.iterdump())


def test_compare_without_storage_leaves_the_users_database_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The user's own study sits in ./hpsearch.db (and $HPSEARCH_STORAGE names it); compare
    without --storage puts its studies in OUT/compare.db and does not touch hpsearch.db."""
    monkeypatch.chdir(tmp_path)
    own = tmp_path / "hpsearch.db"
    monkeypatch.setenv("HPSEARCH_STORAGE", f"sqlite:///{own}")
    config = write_config(tmp_path, "mine")
    assert main(["create", str(config)]) == 0
    before = _dump(own)
    out = tmp_path / "report"
    argv = ["compare", str(config), "--samplers", "random", "--budget", "2", "--repeats", "1"]
    assert main([*argv, "--out", str(out)]) == 0
    assert f"in sqlite:///{out / 'compare.db'}" in capsys.readouterr().err
    assert _dump(own) == before
    assert optuna.get_all_study_names(f"sqlite:///{own}") == ["mine"]
    assert optuna.get_all_study_names(f"sqlite:///{out / 'compare.db'}") == ["mine-random-r1"]
    assert (out / "summary.json").exists()


def test_compare_schema_without_storage_is_exit_2_and_leaves_the_users_database_alone(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """$HPSEARCH_STORAGE names the user's PostgreSQL database: `compare --schema S` without
    --storage must not put the compared studies there (in schema S); it says to give --storage."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HPSEARCH_STORAGE", pg_url)
    config = write_config(tmp_path, "mine")
    out = tmp_path / "report"
    argv = ["compare", str(config), "--samplers", "random", "--budget", "2", "--repeats", "1"]
    assert main([*argv, "--schema", "cmp_leak", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"hpsearch: error: --schema cmp_leak: give --storage too (without it, the compared "
        f"studies go to their own SQLite file, {out / 'compare.db'}, which has no schemas)"
    ]
    schemas = query(
        pg_url, "SELECT count(*) FROM information_schema.schemata WHERE schema_name = 'cmp_leak'"
    )
    assert schemas == [(0,)]
    assert not out.exists()


@pytest.mark.slow
def test_compare_with_worker_processes_keeps_to_its_own_database_under_a_users_schema(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user whose shell sets $HPSEARCH_SCHEMA (for their PostgreSQL database) runs compare with
    two local worker processes: they work in OUT/compare.db, as the parent does."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HPSEARCH_SCHEMA", "tuning")
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the worker processes import the task from tests/
    config = write_config(tmp_path, "mine")
    out = tmp_path / "report"
    argv = ["compare", str(config), "--samplers", "random", "--budget", "2", "--repeats", "1"]
    assert main([*argv, "--workers", "2", "--out", str(out)]) == 0
    assert optuna.get_all_study_names(f"sqlite:///{out / 'compare.db'}") == ["mine-random-r1"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary
    assert not (tmp_path / "hpsearch.db").exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--samplers", "grid,bogus", "--budget", "4"], "--samplers: unknown value 'bogus'"),
        (["--samplers", "grid,random", "--budget", "3"], "below the grid's minimum of 4"),
        (["--budget", "4", "--repeats", "0"], "--repeats: must be >= 1"),
        (["--budget", "4", "--budget-epochs", "8"], "not allowed with argument"),
        (["--samplers", "grid", "--budget-epochs", "6"], "below the grid's minimum of 4"),
        (["--pruners", "none,bohb", "--budget", "4"], "--pruners: unknown value 'bohb'"),
    ],
)
def test_bad_input_is_exit_2_and_writes_nothing(
    tmp_path: Path, extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, "bad")
    db, out = tmp_path / "study.db", tmp_path / "out"
    code = main(["compare", str(config), *extra, "--out", str(out), "--storage", f"sqlite:///{db}"])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not db.exists() and not out.exists()


def _runs(label: str, bests: list[float], maximize: bool = True) -> list[RunResult]:
    return [
        RunResult(
            name=f"s-{label}-r{k}",
            label=label,
            repeat=k,
            seed=k,
            maximize=maximize,
            trials=[TrialPoint(number=0, state="COMPLETE", value=b, params={"lr": 0.1}, epochs=3)],
        )
        for k, b in enumerate(bests, start=1)
    ]


def _summary(a: list[float], b: list[float], direction: str = "maximize") -> dict[str, Any]:
    config = space_config("s")
    config = dataclasses.replace(
        config, study=dataclasses.replace(config.study, direction=direction)
    )
    request = CompareRequest(
        config_path="c.toml",
        config=config,
        strategies=(Strategy("random"), Strategy("tpe")),
        budget=1,
        repeats=len(a),
        out_dir=Path("."),
        target=None,
    )
    maximize = direction == "maximize"
    runs = _runs("random", a, maximize) + _runs("tpe", b, maximize)
    return summarize(runs, request, config.space, None)


def test_the_report_names_a_winner_only_on_evidence() -> None:
    one = _summary([0.9], [0.5])
    assert one["tests"] == [] and "One repeat per strategy" in one["conclusions"][0]
    assert not any("beats" in c for c in one["conclusions"])

    apart = _summary([0.90, 0.91, 0.92, 0.93, 0.94, 0.95], [0.80, 0.81, 0.82, 0.83, 0.84, 0.85])
    (test,) = apart["tests"]
    assert test["significant"] and test["a_better_share"] == 1.0
    assert apart["conclusions"][0].startswith(
        "random beats tpe: random ends 0.1 higher than tpe (95% interval "
    )
    assert "random ahead in 36 of 36 pairings; significant (" in apart["conclusions"][0]

    mixed = _summary([0.90, 0.82, 0.93, 0.84, 0.95, 0.81], [0.91, 0.83, 0.92, 0.85, 0.80, 0.94])
    assert not mixed["tests"][0]["significant"]
    assert "not significant with 6 repeats" in mixed["conclusions"][0]
    # The target is a pooled quantile of all runs: 3 runs in 4 or more reached it.
    reached = sum(s["reached_target"] for s in mixed["strategies"].values())
    assert reached == 10 and mixed["target"]["value"] == 0.82


def test_the_effect_reads_the_right_way_round_whatever_the_test_says() -> None:
    """The issue's case: 3 repeats, one strategy ahead in every pairing. No test can be
    significant, yet the report says who leads, by how much and in how many pairings; the
    pairing table names the leader (no 'first better in 0%' to read backwards)."""
    few = _summary([0.905, 0.907, 0.909], [0.945, 0.947, 0.949])
    (test,) = few["tests"]
    assert not test["significant"]
    assert (test["leader"], test["other"], test["leader_ahead"], test["pairings"]) == (
        "tpe",
        "random",
        9,
        9,
    )
    assert test["difference"] == pytest.approx(0.04)
    low, high = test["difference_ci95"]
    assert 0 < low <= 0.04 <= high
    line = few["conclusions"][0]
    assert line.startswith(f"tpe ends 0.04 higher than random (95% interval {low:.3g} to ")
    assert "tpe ahead in 9 of 9 pairings; not significant with 3 repeats" in line
    assert "no difference could be significant" in line
    blocks = report_blocks(few, [])
    (table,) = [b for b in blocks if b[0] == "table" and b[1][0] == "pair"]
    (row,) = table[2]
    assert "tpe in 9 of 9" in row and row[4].startswith("tpe +0.04 (")
    # Minimize: the leader is the lower mean, 'lower' is the way it is ahead.
    lower = _summary([0.5, 0.6, 0.7], [0.3, 0.4, 0.5], direction="minimize")
    assert lower["conclusions"][0].startswith("tpe ends 0.2 lower than random (95% interval ")


def test_plots_keep_grid_points_whole_and_count_trials_in_whole_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Grid points sit at the ends of a parameter's range: the axis leaves room around them
    (on a log axis too). Trials and epochs are counted: no tick at 1.5 trials."""
    import matplotlib.pyplot as plt

    figures: dict[int, Any] = {}
    monkeypatch.setattr(plt, "close", lambda fig: figures.setdefault(len(figures), fig))
    config = space_config("s")
    request = CompareRequest(
        config_path="c.toml",
        config=config,
        strategies=(Strategy("grid"), Strategy("random")),
        budget=3,
        repeats=2,
        out_dir=tmp_path,
        target=None,
    )
    results = [
        RunResult(
            name=f"s-{label}-r{k}",
            label=label,
            repeat=k,
            seed=k,
            maximize=True,
            trials=[
                TrialPoint(
                    number=i,
                    state="COMPLETE",
                    value=0.5 + 0.1 * i + 0.01 * k,
                    params={"lr": lr, "dropout": 0.0},
                    epochs=1,
                )
                for i, lr in enumerate((1e-4, 1e-1, 1e-4))
            ],
        )
        for label in ("grid", "random")
        for k in (1, 2)
    ]
    summary = summarize(results, request, config.space, None)
    written = [name for name, _ in write_plots(results, summary, config.space, tmp_path)]
    by_name = dict(zip(written, figures.values(), strict=True))
    for name in ("best_vs_trials.png", "best_vs_epochs.png"):
        (ax,) = by_name[name].axes
        low, high = ax.get_xlim()
        ticks = [t for t in ax.get_xticks() if low <= t <= high]
        assert ticks and all(float(t).is_integer() for t in ticks), (name, ticks)
    for ax in by_name["score_vs_lr.png"].axes:
        low, high = ax.get_xlim()
        assert ax.get_xscale() == "log"
        assert low < 1e-4 / 1.2 and high > 1e-1 * 1.2, (low, high)  # room around the points
