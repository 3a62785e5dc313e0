"""One cache of a study's trials per process: the samplers' mirror and the pruners' view read
the same trials, each change read from the database once."""

from __future__ import annotations

from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from search.db import trial_changes
from search.db.storage import open_storage
from search.db.trial_changes import RUNG_PREFIX, TrialCache
from search.pruning.storage import PruningStorage
from search.sampling.mirror import StudyMirror
from search.study.parse_config import parse_config
from search.study.studies import create_study
from search.worker.loop import Worker
from search.worker.trial import TrialOutcome, TrialRun
from tests.helpers.configs import tpe_config
from tests.helpers.objectives import curve


def _seen(trials: list[optuna.trial.FrozenTrial]) -> dict[int, tuple]:
    return {
        t._trial_id: (
            t.number,
            t.state.name,
            t.value,
            tuple(sorted((k, v) for k, v in t.system_attrs.items() if k.startswith(RUNG_PREFIX))),
        )
        for t in trials
        if t.state.is_finished()
    }


def _rungs(trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
    return {k: v for k, v in trial.system_attrs.items() if k.startswith(RUNG_PREFIX)}


def test_the_mirror_and_the_pruning_view_see_the_same_trials(
    storage_url: str, study_name: str
) -> None:
    config = tpe_config(study_name, 9)
    storage = open_storage(storage_url, create=True)
    ref, _ = create_study(storage, config)
    reader = open_storage(storage_url)  # another process's views of the study
    mirror = StudyMirror(reader, ref)
    pruning = PruningStorage(reader, ref)
    assert mirror.cache is pruning.cache is TrialCache.of(reader, ref.study_id)
    mirror.refresh()
    assert mirror.get_all_trials(ref.study_id) == []

    assert Worker(storage, ref, run_trial=curve, grace_s=5, progress=False).run() == 0

    # The pruning view looks: the mirror holds the same trials without reading them again.
    pruning.refresh()
    assert mirror.refresh() == 0
    by_optuna = optuna.load_study(study_name=study_name, storage=storage_url).get_trials()
    assert any(k.startswith(RUNG_PREFIX) for t in by_optuna for k in t.system_attrs), (
        "Hyperband recorded no rung value: nothing compared"
    )
    assert len(_seen(by_optuna)) == 9
    assert _seen(mirror.get_all_trials(ref.study_id)) == _seen(by_optuna)
    assert _seen(pruning.get_all_trials(ref.study_id)) == _seen(by_optuna)
    assert {t.number: t.params for t in mirror.get_all_trials(ref.study_id)} == {
        t.number: t.params for t in by_optuna
    }


def _asha_config(name: str) -> Any:
    """README's default, small: TPE across fidelities + promotion ASHA on an epoch budget."""
    return parse_config(
        {
            "study": {"name": name, "budget_epochs": 120, "sampler": "tpe", "seed": 5},
            "pruner": {"type": "asha", "min_resource": 1, "reduction_factor": 3},
            "task": {"name": "digits", "epochs": 9},
            "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
        }
    )


def test_paused_trials_resumed_between_two_looks_show_their_new_reports(
    storage_url: str, study_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TPE across fidelities learns from the reports of paused trials. A refresh reads those
    reports again only for a trial that runs or whose state or lease changed since; a trial
    paused, resumed and paused again between two looks of another process still shows every
    report and rung value it has, as a fresh read of the study does."""
    config = _asha_config(study_name)
    storage = open_storage(storage_url, create=True)
    ref, _ = create_study(storage, config)
    reader = open_storage(storage_url)  # another process, looking now and then
    cache = TrialCache.of(reader, ref.study_id)
    cache.need(finished_curves=True, live_curves=True)

    read_curves_of: list[list[int]] = []
    real_read_curves = trial_changes.read_curves

    def counting(conn: Any, trial_ids: Any) -> Any:
        read_curves_of.append(list(trial_ids))
        return real_read_curves(conn, trial_ids)

    monkeypatch.setattr(trial_changes, "read_curves", counting)
    looks = {"n": 0, "compared": 0, "skipped": 0, "resumed": 0}
    differ: list[int] = []  # trials the cache shows otherwise than a fresh read

    def look_then_train(run: TrialRun) -> TrialOutcome:
        looks["n"] += 1
        looks["resumed"] += bool(run.reported)
        if looks["n"] % 3 == 0:  # a few claims, pauses and resumes between two looks
            read_curves_of.clear()
            cache.refresh()
            read = {i for ids in read_curves_of for i in ids}
            fresh = TrialCache(open_storage(storage_url), ref.study_id)
            fresh.need(finished_curves=True, live_curves=True)
            fresh.refresh()
            mine = {t._trial_id: t for t in cache.trials()}
            for trial in fresh.trials():
                if trial.params:
                    seen = mine.get(trial._trial_id)
                    shown = None if seen is None else (seen.state, seen.intermediate_values)
                    if shown != (trial.state, trial.intermediate_values):
                        differ.append(trial.number)  # the trial function must not raise
                    looks["compared"] += 1
            # Rung values may be written meanwhile (by the pruner's thread): looked at again
            # after the fresh read, the cache holds at least every one that read saw.
            cache.refresh()
            mine = {t._trial_id: t for t in cache.trials()}
            for trial in fresh.trials():
                seen = mine.get(trial._trial_id)
                if trial.params and (seen is None or _rungs(trial).items() - _rungs(seen).items()):
                    differ.append(trial.number)
            waiting = {t._trial_id for t in mine.values() if t.state == TrialState.WAITING}
            looks["skipped"] += len(waiting - read)
        return curve(run, epoch_s=0.0)

    worker = Worker(storage, ref, run_trial=look_then_train, grace_s=5, progress=False)
    assert worker.run() == 0
    assert differ == []
    assert looks["resumed"] > 0, "no paused trial was resumed: nothing compared"
    assert looks["compared"] > 20
    assert looks["skipped"] > 0, "every paused trial's reports were read at every look"


def test_a_waiting_trial_that_changed_shows_it_at_the_next_look(
    storage_url: str, study_name: str
) -> None:
    """A refresh skips the waiting trials that read as they did at the last look. A rung value
    another process writes later to a waiting trial (a pruner's thread writes it after the
    pause), and a claim of it, are both seen at the next look."""
    storage = open_storage(storage_url, create=True)
    ref, _ = create_study(storage, tpe_config(study_name, 9))
    writer = storage.optuna_storage()  # another process's writes
    dist = optuna.distributions.FloatDistribution(0.0, 1.0)
    trial_id = writer.create_new_trial(
        ref.study_id,
        template_trial=optuna.trial.create_trial(
            state=TrialState.WAITING, params={"x": 0.25}, distributions={"x": dist}
        ),
    )
    reader = open_storage(storage_url)
    cache = TrialCache.of(reader, ref.study_id)
    applied: list[int] = []
    real_apply = cache._apply

    def counting(read: Any) -> int:
        applied.append(len(read.rows))
        return real_apply(read)

    cache._apply = counting  # type: ignore[method-assign]

    def shown() -> tuple[str, dict[str, Any]]:
        trial = cache.get(trial_id)
        assert trial is not None and trial.params == {"x": 0.25}
        rungs = {k: v for k, v in trial.system_attrs.items() if k.startswith(RUNG_PREFIX)}
        return trial.state.name, rungs

    cache.refresh()
    assert shown() == ("WAITING", {})
    cache.refresh()
    assert applied == [1, 0], "the unchanged waiting trial was looked at again"

    writer.set_trial_system_attr(trial_id, f"{RUNG_PREFIX}0", 0.5)
    assert cache.refresh() == 1
    assert shown() == ("WAITING", {f"{RUNG_PREFIX}0": 0.5})

    writer.set_trial_system_attr(trial_id, f"{RUNG_PREFIX}1", 0.75)
    writer.set_trial_state_values(trial_id, TrialState.RUNNING)
    cache.refresh()
    assert shown() == ("RUNNING", {f"{RUNG_PREFIX}0": 0.5, f"{RUNG_PREFIX}1": 0.75})
