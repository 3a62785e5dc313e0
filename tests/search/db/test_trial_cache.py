"""One cache of a study's trials per process: the samplers' mirror and the pruners' view read
the same trials, each change read from the database once."""

from __future__ import annotations

import optuna

from search.db.storage import open_storage
from search.db.trial_changes import RUNG_PREFIX, TrialCache
from search.pruning.storage import PruningStorage
from search.sampling.mirror import StudyMirror
from search.study.studies import create_study
from search.worker.loop import Worker
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
