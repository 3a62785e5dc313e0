"""What the local, read-mostly views of a study (the samplers' mirror, the pruners' rungs) answer
without a query: the facts of a study that never change once it exists."""

from __future__ import annotations

import optuna
from optuna.study import StudyDirection

from search.study.studies import StudyRef

__all__ = ["StudyFactsStorage"]


class StudyFactsStorage(optuna.storages.BaseStorage):
    """An Optuna storage for one study whose id, name and direction are known: answered from
    memory (Optuna's samplers and pruners ask on every call). Subclasses answer the rest."""

    def __init__(self, study: StudyRef) -> None:
        self._study = study
        self._directions = [StudyDirection[study.config.study.direction.upper()]]

    def get_study_id_from_name(self, study_name: str) -> int:
        return self._study.study_id

    def get_study_name_from_id(self, study_id: int) -> str:
        return self._study.name

    def get_study_directions(self, study_id: int) -> list[StudyDirection]:
        return list(self._directions)
