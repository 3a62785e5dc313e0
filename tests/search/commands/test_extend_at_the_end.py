"""More budget as a study ends, and for the trials its budget cut in the middle of their
training (issue 30, item 4).

A study with `budget_epochs = 12`, no pruner, 9 epochs a trial, one worker: trial 0 trains its 9
epochs, trial 1 is cut by the budget after epoch 3. Cut, it is handed back with its checkpoint;
the study's end ends it PRUNED (value of epoch 3) and keeps the checkpoint; a raised budget
queues it again and a worker resumes it from epoch 3: 9 + 9 = 18 epochs, counted and reported.

The race: the budget raised (`hpsearch extend`) just as the worker ends the study, after it read
the budgets and before its end is written, or just after. Either way the study goes on and the
workers spend exactly the new total.
"""

from __future__ import annotations

import io
import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest

from search.commands.cli import main as run_cli
from search.db import pauses
from search.db.statements import upsert_attributes
from search.db.storage import open_storage
from search.db.studies import CONFIG_ATTR, lock_study
from search.db.tables import study_system_attributes
from search.study.studies import create_study, open_study
from search.worker import claiming
from search.worker.artifacts import artifact_store_for
from search.worker.loop import Worker
from search.worker.trial import TrialOutcome, TrialRun
from tests.helpers.configs import pruner_config
from tests.helpers.processes import spent_epochs

NONE = {"type": "none"}


def checkpointed_curve(run: TrialRun) -> TrialOutcome:
    """`curve` that keeps a checkpoint (its epoch) after each epoch and resumes from it."""
    start = 0
    assert run.checkpoints is not None
    stream = run.checkpoints.open()
    if stream is not None:
        with stream:
            start = json.loads(stream.read())["epoch"]
    value = None
    attrs = {"resumed_at": start}  # as the trainer's provenance says where it resumed
    for epoch in range(start + 1, run.config.task.epochs + 1):
        value = run.params["x"] * epoch / run.config.task.epochs
        run.checkpoints.write(io.BytesIO(json.dumps({"epoch": epoch}).encode()))
        if run.report(epoch, value):
            return TrialOutcome(status="pruned", value=value, user_attrs=attrs)
    return TrialOutcome(status="completed", value=value, user_attrs=attrs)


def run_worker(url: str, name: str, artifacts: Path) -> int:
    storage = open_storage(url)
    try:
        study = open_study(storage, name)
        worker = Worker(
            storage,
            study,
            run_trial=checkpointed_curve,
            grace_s=5.0,
            progress=False,
            artifacts=artifact_store_for(storage, str(artifacts)),
        )
        return worker.run()
    finally:
        storage.close()


def extend(url: str, name: str, epochs: int) -> None:
    assert (
        run_cli(["extend", "--study", name, "--budget-epochs", str(epochs), "--storage", url]) == 0
    )


def made(url: str, name: str, tmp_path: Path) -> Path:
    storage = open_storage(url, create=True)
    try:
        create_study(storage, pruner_config(name, NONE, budget_epochs=12))
    finally:
        storage.close()
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    return artifacts


def wrap_end(
    monkeypatch: pytest.MonkeyPatch,
    before: Callable[[], None] | None = None,
    after: Callable[[], None] | None = None,
) -> list[Any]:
    """pauses.end_waiting as the worker calls it, with `before`/`after` run around its first
    call; returns what each call returned."""
    original = pauses.end_waiting
    results: list[Any] = []

    def end_waiting(*args: Any, **kwargs: Any) -> Any:
        first = not results
        if first and before is not None:
            before()
        result = original(*args, **kwargs)
        results.append(result)
        if first and after is not None:
            after()
        return result

    monkeypatch.setattr(claiming.pauses, "end_waiting", end_waiting)
    return results


def trials_of(url: str, name: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=name, storage=url).trials


def test_a_trial_cut_by_the_budget_goes_on_from_its_checkpoint_when_the_budget_is_raised(
    storage_url: str, study_name: str, tmp_path: Path
) -> None:
    artifacts = made(storage_url, study_name, tmp_path)
    assert run_worker(storage_url, study_name, artifacts) == 0
    assert spent_epochs(storage_url, study_name) == (12, 12)
    first, cut = trials_of(storage_url, study_name)[:2]
    assert first.state.name == "COMPLETE" and len(first.intermediate_values) == 9
    # Cut after epoch 3: PRUNED by the study's end, with that epoch's value, checkpoint kept.
    assert cut.state.name == "PRUNED" and sorted(cut.intermediate_values) == [1, 2, 3]
    assert cut.value == cut.intermediate_values[3]
    assert cut.system_attrs["hpsearch:ended_by"] == "budget"
    assert cut.system_attrs["hpsearch:ended_as"] == "queued"
    assert cut.system_attrs["hpsearch:cut_at"] == 3
    assert "hpsearch:checkpoint" in cut.system_attrs
    # Its provenance, though no worker ended it.
    assert cut.user_attrs["worker_id"] and cut.user_attrs["resumed_at"] == 0

    extend(storage_url, study_name, 18)
    again = trials_of(storage_url, study_name)[1]
    assert again.state.name == "WAITING" and again.value is None
    assert "hpsearch:ended_by" not in again.system_attrs
    assert run_worker(storage_url, study_name, artifacts) == 0  # a worker that joins
    assert spent_epochs(storage_url, study_name) == (18, 18)
    done = trials_of(storage_url, study_name)
    assert done[1].state.name == "COMPLETE" and sorted(done[1].intermediate_values) == list(
        range(1, 10)
    )
    assert done[1].user_attrs["resumed_at"] == 3  # from its checkpoint, not from scratch
    assert len(done) == 2


def test_a_budget_raised_as_the_worker_ends_the_study_is_spent(
    storage_url: str,
    study_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The worker found the budget spent (it read the budgets: 12) and is about to end the study
    when `extend` raises it to 18: it must not end it (before the fix it ended the waiting
    trials and left at 12 epochs, and nothing reopened them: the raise had come first)."""
    artifacts = made(storage_url, study_name, tmp_path)
    results = wrap_end(monkeypatch, before=lambda: extend(storage_url, study_name, 18))
    with caplog.at_level(logging.INFO, logger="search.worker.claiming"):
        assert run_worker(storage_url, study_name, artifacts) == 0
    assert results[0] is None  # nothing ended: the stored budget was no longer the one spent
    assert "its budget was raised as it was ending; it goes on" in caplog.text
    assert spent_epochs(storage_url, study_name) == (18, 18)
    done = trials_of(storage_url, study_name)
    assert [t.state.name for t in done] == ["COMPLETE", "COMPLETE"]
    assert done[1].user_attrs["resumed_at"] == 3


def test_a_budget_raised_just_after_the_worker_ended_the_study_reopens_what_it_ended(
    storage_url: str, study_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    artifacts = made(storage_url, study_name, tmp_path)
    results = wrap_end(monkeypatch, after=lambda: extend(storage_url, study_name, 18))
    assert run_worker(storage_url, study_name, artifacts) == 0  # it ended the study and left
    assert results[0][0] == [1]  # trial 1 ended (and one sampled ahead removed)
    assert spent_epochs(storage_url, study_name) == (12, 12)
    cut = trials_of(storage_url, study_name)[1]
    # Reopened by extend; the worker's sweep after its end kept its checkpoint.
    assert cut.state.name == "WAITING" and "hpsearch:checkpoint" in cut.system_attrs
    monkeypatch.undo()
    assert run_worker(storage_url, study_name, artifacts) == 0  # a worker that joins
    assert spent_epochs(storage_url, study_name) == (18, 18)
    assert [t.state.name for t in trials_of(storage_url, study_name)] == ["COMPLETE"] * 2


def test_the_study_end_waits_for_a_raise_under_way_and_then_ends_nothing(
    pg_url: str, study_name: str, tmp_path: Path
) -> None:
    """On PostgreSQL the two are concurrent transactions: the study's end waits for the raise
    that holds the study's row, then sees the new budget."""
    made(pg_url, study_name, tmp_path)
    storage = open_storage(pg_url)
    try:
        study = open_study(storage, study_name)
        spent = {"n_trials": None, "budget_epochs": 12, "budget_hours": None}
        raised = study.config.with_study(budget_epochs=18).to_dict()
        result: list[Any] = []
        ender = threading.Thread(
            target=lambda: result.append(
                pauses.end_waiting(storage, study.study_id, "budget", budgets=spent)
            )
        )
        with storage.transaction() as conn:
            lock_study(conn, study.study_id)
            upsert_attributes(conn, study_system_attributes, study.study_id, {CONFIG_ATTR: raised})
            ender.start()
            time.sleep(1.0)
            assert ender.is_alive()  # waits for the raise to commit
        ender.join(timeout=30)
        assert result == [None]
        assert pauses.end_waiting(
            storage, study.study_id, "budget", budgets={**spent, "budget_epochs": 18}
        ) == ([], [])
    finally:
        storage.close()
