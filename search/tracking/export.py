"""`hpsearch export`: a study's trials written into a tracker after the fact.

For a study that ran without a tracker, or whose tracker was away for a while (the worker's
log then says what could not be sent). Each trial's run is found by its key, as the workers
find it, and only what it lacks is written: exporting twice adds nothing, and a study still
running can be exported again later (its workers keep writing to the same runs).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import optuna
from optuna.trial import TrialState

from search.db.storage import Storage
from search.study.studies import StudyRef
from search.tracking.base import Tracker
from search.tracking.records import TrialEnded, TrialStarted, provenance_tags

__all__ = ["ExportCounts", "export_study"]

_ENDED = {TrialState.COMPLETE: "complete", TrialState.PRUNED: "pruned", TrialState.FAIL: "failed"}


@dataclass
class ExportCounts:
    finished: int = 0
    running: int = 0
    not_started: int = 0


def export_study(storage: Storage, study: StudyRef, tracker: Tracker) -> ExportCounts:
    """Write every started trial of `study` into `tracker` (idempotent)."""
    trials = optuna.load_study(study_name=study.name, storage=storage.optuna_storage()).get_trials(
        deepcopy=False
    )
    counts = ExportCounts()
    for trial in trials:
        started = trial.datetime_start.timestamp() if trial.datetime_start else time.time()
        if trial.state == TrialState.WAITING and not trial.intermediate_values:
            counts.not_started += 1
            continue
        tags = provenance_tags(trial.user_attrs)
        tracker.start_trial(
            TrialStarted(
                study_uid=study.uid,
                study_name=study.name,
                number=trial.number,
                params=dict(trial.params),
                metric=study.config.study.metric,
                reported=dict(trial.intermediate_values),
                tags=tags,
                started_at=started,
                running=trial.state == TrialState.RUNNING,
                live=False,
            )
        )
        state = _ENDED.get(trial.state)
        if state is None:  # running, or handed back: its worker continues the same run
            counts.running += 1
            continue
        ended = trial.datetime_complete.timestamp() if trial.datetime_complete else time.time()
        tracker.end_trial(
            TrialEnded(
                number=trial.number,
                state=state,  # type: ignore[arg-type]
                value=trial.value,
                pruned_at=max(trial.intermediate_values, default=0) if state == "pruned" else None,
                reason=trial.system_attrs.get("fail_reason") if state == "failed" else None,
                tags=tags,
                ended_at=ended,
            )
        )
        counts.finished += 1
    # Nothing running, paused or queued, and every trial made (or a budget, which ends a study
    # by removing what is queued): the study is over.
    settings = study.config.study
    idle = counts.running == counts.not_started == 0
    if idle and (len(trials) >= settings.max_trials or settings.has_budget):
        tracker.end_study()
    tracker.close()
    return counts
