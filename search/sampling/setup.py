"""Where a study begins: what `create`, `run` and `compare` do before any worker starts."""

from __future__ import annotations

from collections.abc import Sequence

from search.db.migrate import check_schema, upgrade
from search.db.storage import Storage
from search.sampling.enqueue import enqueue_configured
from search.sampling.sample_ahead import queue_first_trials
from search.study.note import save_study_note
from search.study.settings import StudyConfig
from search.study.studies import StudyRef, create_study

__all__ = ["set_up_study"]


def set_up_study(
    storage: Storage, config: StudyConfig, argv: Sequence[str]
) -> tuple[StudyRef, bool]:
    """The study (created, or found again with the same config), its first trials queued and its
    note for the dashboard (its config and the command `argv`, passwords masked), on tables that
    are up to date; returns (study, created).

    Only a SQLite file is migrated here (the one-command start); on PostgreSQL that is
    `hpsearch migrate`'s alone, so that workers' roles need no DDL rights: a database that is
    not migrated is a StorageError saying to run it.
    """
    if storage.is_postgres:
        check_schema(storage)
    else:
        upgrade(storage)
    study, created = create_study(storage, config)
    if created:
        save_study_note(storage, study, argv)
        enqueue_configured(storage, study)  # [[study.enqueue]]: the first trials
        queue_first_trials(storage, study)
    return study, created
