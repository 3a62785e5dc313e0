"""More budget for a study that ended on its budget: raised in the config (`run` again) or with
`hpsearch extend`, with 4 workers on PostgreSQL under ASHA. The epochs counted in the database
equal the new total, trials paused at the study's end are promoted again from their checkpoints,
the trials so far stay (the sampler's history); lowering below what was spent is refused."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest
import sqlalchemy as sa

from search.commands.cli import main as run_cli
from search.db.checkpoint_pointers import POINTER_ATTR
from search.db.storage import open_storage
from search.db.tables import (
    trial_system_attributes,
    trials,
)
from search.study.studies import create_study, find_study
from tests.helpers.cli import hpsearch
from tests.helpers.configs import ASHA_PRUNER, ASHA_STUDY, pruner_config
from tests.helpers.objectives import join_all, start_workers
from tests.helpers.processes import spent_epochs


@pytest.mark.slow
def test_more_budget_continues_the_study(pg_url: str, study_name: str, tmp_path: Path) -> None:
    config = tmp_path / "study.toml"
    text = ASHA_STUDY.format(name=study_name, direction="maximize")
    config.write_text(text.replace("budget_epochs = 30", "budget_epochs = 12"))
    flags = ("--storage", pg_url)
    first = hpsearch("run", str(config), "--workers", "4", *flags, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    assert spent_epochs(pg_url, study_name) == (12, 12)
    before = optuna.load_study(study_name=study_name, storage=pg_url).trials
    kept = _with_checkpoint(pg_url, study_name)
    paused_at_end = {n for n in kept if before[n].system_attrs.get("hpsearch:ended_by") == "budget"}
    assert paused_at_end, "the budget should have ended trials paused at a rung"

    # Raised in the config: the same command continues the study.
    config.write_text(text.replace("budget_epochs = 30", "budget_epochs = 24"))
    second = hpsearch("run", str(config), "--workers", "4", *flags, cwd=tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    # Paused at a rung, or cut by the budget in the middle of one (queued: resumed as it is).
    cut = {n for n in paused_at_end if before[n].system_attrs["hpsearch:ended_as"] == "queued"}
    assert (
        "continues with more budget (study.budget_epochs 12 -> 24; 12 epochs and "
        f"{len(before)} trials spent); {len(paused_at_end - cut)} paused trial(s) promotable "
        "again" + (f"; {len(cut)} trial(s) cut by the budget" if cut else "\n")
    ) in second.stderr
    assert spent_epochs(pg_url, study_name) == (24, 24)
    after = optuna.load_study(study_name=study_name, storage=pg_url).trials
    # The trials so far are all still there, with their params: the sampler's history.
    assert [(t.number, t.params) for t in after[: len(before)]] == [
        (t.number, t.params) for t in before
    ]
    # Each trial paused at the first end went on from its checkpoint when the promotion rule
    # picked it, or is paused again (its checkpoint kept) at the second end.
    again = _with_checkpoint(pg_url, study_name)
    for n in paused_at_end:
        was = max(before[n].intermediate_values)
        if max(after[n].intermediate_values) > was:
            # From its checkpoint, never from scratch (its last resume: where the first end
            # left it, or a later rung it paused at again).
            assert after[n].user_attrs["resumed_from"]["epoch"] >= was, n
        else:
            assert n in again and after[n].system_attrs["hpsearch:ended_by"] == "budget", n

    # `hpsearch extend`: below what was spent is refused, nothing changes; more is taken.
    low = hpsearch("extend", "--study", study_name, "--budget-epochs", "20", *flags, cwd=tmp_path)
    assert low.returncode == 2
    assert low.stderr.strip().splitlines() == [
        f"hpsearch: error: study {study_name!r}: study.budget_epochs 24 -> 20 is below the 24 "
        "epochs already trained"
    ]
    hours = hpsearch("extend", "--study", study_name, "--budget-hours", "2", *flags, cwd=tmp_path)
    assert hours.returncode == 2 and "has no study.budget_hours to raise" in hours.stderr
    more = hpsearch("extend", "--study", study_name, "--budget-epochs", "30", *flags, cwd=tmp_path)
    assert more.returncode == 0, more.stderr
    # The reopened trials are paused again: status names the one leading (highest rung, then
    # best value there), beside the best finished one.
    listed = hpsearch(
        "trials", "--study", study_name, "--state", "paused", "--json", *flags, cwd=tmp_path
    )
    paused = json.loads(listed.stdout)
    ended = again - {t.number for t in after if t.state.name == "COMPLETE"}
    cut = {n for n in ended if after[n].system_attrs["hpsearch:ended_as"] == "queued"}
    assert {p["number"] for p in paused} == ended - cut
    # Those the second end found cut in the middle of a rung are queued again, to resume.
    listed = hpsearch(
        "trials", "--study", study_name, "--state", "waiting", "--json", *flags, cwd=tmp_path
    )
    assert {t["number"] for t in json.loads(listed.stdout)} == cut
    status = hpsearch("status", "--study", study_name, "--json", *flags, cwd=tmp_path)
    leading = json.loads(status.stdout)["leading_paused"]
    top = max(paused, key=lambda p: (p["rung"], p["value"], -p["number"]))
    assert (leading["number"], leading["rung"]) == (top["number"], top["rung"])
    shown = hpsearch("status", "--study", study_name, *flags, cwd=tmp_path).stdout
    assert f"leading paused: trial {top['number']}  val_accuracy " in shown
    config.write_text(text)  # budget_epochs = 30: now the study's own config
    third = hpsearch("run", str(config), "--workers", "4", *flags, cwd=tmp_path)
    assert third.returncode == 0, third.stderr[-3000:]
    assert spent_epochs(pg_url, study_name) == (30, 30)

    # Anything else changed is still refused.
    config.write_text(text.replace("seed = 3", "seed = 4"))
    other = hpsearch("create", str(config), *flags, cwd=tmp_path)
    assert other.returncode == 2 and "different config (study.seed: 3 -> 4)" in other.stderr


def _with_checkpoint(url: str, name: str) -> set[int]:
    """Numbers of the study's ended trials whose checkpoint is kept."""
    storage = open_storage(url)
    try:
        study = find_study(storage, name)
        assert study is not None
        a = trial_system_attributes
        with storage.autocommit() as conn:
            rows = conn.execute(
                sa.select(trials.c.number)
                .join(a, a.c.trial_id == trials.c.trial_id)
                .where(
                    trials.c.study_id == study.study_id,
                    trials.c.state.in_(["COMPLETE", "PRUNED", "FAIL"]),
                    a.c.key == POINTER_ATTR,
                )
            ).all()
    finally:
        storage.close()
    return {row.number for row in rows}


def _wait_until(
    done: Callable[[], bool], what: str, workers: list[Any], timeout_s: float = 120
) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline or not all(w.is_alive() for w in workers):
            for w in workers:
                w.kill()
            raise AssertionError(f"the workers ended (or {timeout_s} s passed) before {what}")
        time.sleep(0.05)


@pytest.mark.slow
def test_workers_running_when_the_budget_is_raised_spend_the_new_total(
    pg_url: str, study_name: str, tmp_path: Path
) -> None:
    storage = open_storage(pg_url, create=True)
    try:
        ref, _ = create_study(storage, pruner_config(study_name, ASHA_PRUNER, budget_epochs=60))
    finally:
        storage.close()
    workers = start_workers(pg_url, study_name, 4, objective="slow_curve")
    _wait_until(
        lambda: spent_epochs(pg_url, study_name)[0] >= 10, "10 epochs were trained", workers
    )
    assert (
        run_cli(["extend", "--study", study_name, "--budget-epochs", "120", "--storage", pg_url])
        == 0
    )
    assert join_all(workers, timeout_s=300) == [0] * 4

    # The workers that were running spent exactly the new total, not the one they started with.
    assert spent_epochs(pg_url, study_name) == (120, 120)
    study = optuna.load_study(study_name=study_name, storage=pg_url)
    assert {t.state.name for t in study.trials} <= {"COMPLETE", "PRUNED"}
    assert study.user_attrs["budget"] == "120/120 epochs (0 left)"
    assert ref.config.study.budget_epochs == 60


@pytest.mark.slow
def test_workers_running_when_n_trials_is_raised_run_the_new_count(
    storage_url: str, study_name: str
) -> None:
    storage = open_storage(storage_url, create=True)
    try:
        create_study(storage, pruner_config(study_name, {"type": "none"}, n_trials=6))
    finally:
        storage.close()
    workers = start_workers(storage_url, study_name, 2, objective="slow_curve")

    def one_complete() -> bool:
        trials = optuna.load_study(study_name=study_name, storage=storage_url).trials
        return any(t.state.name == "COMPLETE" for t in trials)

    _wait_until(one_complete, "a trial completed", workers)
    flags = ["--n-trials", "10", "--storage", storage_url]
    assert run_cli(["extend", "--study", study_name, *flags]) == 0
    assert join_all(workers, timeout_s=300) == [0, 0]

    trials = optuna.load_study(study_name=study_name, storage=storage_url).trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 10


def test_a_config_run_again_after_extend_does_not_take_the_budget_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`hpsearch extend` raised the budget; the user then runs the same config (its old budget)
    again: refused with one line saying how to lower it on purpose, the raised budget kept.
    `extend` itself may lower a budget (not below what was spent)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HPSEARCH_STORAGE", raising=False)
    config = tmp_path / "study.toml"
    config.write_text(ASHA_STUDY.format(name="lower", direction="maximize"))  # budget_epochs = 30
    assert run_cli(["create", str(config)]) == 0
    assert run_cli(["extend", "--study", "lower", "--budget-epochs", "40"]) == 0
    capsys.readouterr()
    assert run_cli(["create", str(config)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "hpsearch: error: study 'lower': study.budget_epochs 40 -> 30 would lower the study's "
        "budget (raised with `hpsearch extend`?): raise it in the config too, or lower it on "
        "purpose with hpsearch extend --study lower --budget-epochs 30"
    ]
    url = f"sqlite:///{tmp_path / 'hpsearch.db'}"
    assert _stored_budget(url, "lower") == 40
    assert run_cli(["extend", "--study", "lower", "--budget-epochs", "30"]) == 0
    assert _stored_budget(url, "lower") == 30
    assert run_cli(["create", str(config)]) == 0  # the same config again: nothing to change


def _stored_budget(url: str, name: str) -> int | None:
    storage = open_storage(url)
    try:
        study = find_study(storage, name)
        assert study is not None
        return study.config.study.budget_epochs
    finally:
        storage.close()
