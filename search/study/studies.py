"""Creating and opening studies: the config is stored in the study, so workers need only its name.

Only `create` (and `run`, which creates) writes a study; workers only load it, so a typo in a
worker's study name is an error, never a new empty study.
"""

from __future__ import annotations

import difflib
import json
import logging
import time
import uuid
import warnings
from dataclasses import dataclass

import optuna
import sqlalchemy as sa

from search.db.storage import Storage, StorageError
from search.db.studies import CONFIG_ATTR, UID_ATTR, find_study_row, study_names
from search.study.settings import ConfigError, StudyConfig

__all__ = [
    "StudyRef",
    "create_study",
    "find_study",
    "open_study",
]

logger = logging.getLogger("search.study.studies")


@dataclass(frozen=True)
class StudyRef:
    """A study in a storage, with its config."""

    study_id: int
    name: str
    config: StudyConfig
    uid: str = ""
    """Unique across databases (`UID_ATTR`): names the study's files in a shared directory.
    Studies created before it existed use their id."""


def create_study(storage: Storage, config: StudyConfig) -> tuple[StudyRef, bool]:
    """Create the study, or return the existing one if its config is the same.

    Returns (study, created). A study of that name with a different config is a ConfigError.
    The database must be migrated (`search.db.migrate`); trials are queued by the caller
    (`search.sampling.sample_ahead.queue_first_trials`).
    """
    name = config.study.name
    existing = find_study(storage, name)
    if existing is None:
        try:
            study = optuna.create_study(
                study_name=name,
                storage=storage.optuna_storage(),
                direction=config.study.direction,
            )
        except optuna.exceptions.DuplicatedStudyError:
            existing = find_study(storage, name, wait_s=10.0)  # created concurrently
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                study.set_metric_names([config.study.metric])
            uid = uuid.uuid4().hex
            storage.optuna_storage().set_study_system_attr(study._study_id, UID_ATTR, uid)
            storage.optuna_storage().set_study_system_attr(
                study._study_id, CONFIG_ATTR, config.to_dict()
            )
            logger.info("created study %r in %s", name, storage.safe_url)
            return StudyRef(study._study_id, name, config, uid), True
    if existing is None:
        raise ConfigError(
            f"study {name!r} exists in {storage.safe_url} but is not an hpsearch study"
        )
    diff = existing.config.difference(config)
    if diff is not None:
        from search.study.extend import extend_study  # more budget: the study continues

        extended = extend_study(storage, existing, config)
        if extended is not None:
            return extended, False
        raise ConfigError(
            f"study {name!r} already exists with a different config ({diff}); "
            "use another study.name or the same config"
        )
    return existing, False


def find_study(storage: Storage, name: str, *, wait_s: float = 0.0) -> StudyRef | None:
    """The hpsearch study called `name`, or None. With wait_s, wait for a study being created to
    get its config (Optuna creates the study and its attributes in separate transactions)."""
    deadline = time.monotonic() + wait_s
    while True:
        row = find_study_row(storage, name)
        if row is not None and row.config is not None:
            config = StudyConfig.from_dict(json.loads(row.config))
            uid = json.loads(row.uid) if row.uid is not None else str(row.study_id)
            return StudyRef(row.study_id, name, config, uid)
        if row is None and wait_s == 0.0:
            return None
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.2)


def open_study(storage: Storage, name: str) -> StudyRef:
    """The study a worker joins; StorageError (exit 2) if there is no such hpsearch study."""
    try:
        study = find_study(storage, name, wait_s=5.0)
    except sa.exc.ProgrammingError:
        study = None  # no tables at all: nothing was ever created here
    except sa.exc.OperationalError as exc:
        if "no such table" not in str(exc):
            raise
        study = None
    if study is None:
        close = difflib.get_close_matches(name, study_names(storage), n=1, cutoff=0.6)
        then = (
            f"did you mean {close[0]!r}? (`hpsearch studies` lists them)"
            if close
            else "create it first with `hpsearch create CONFIG`"
        )
        raise StorageError(f"no hpsearch study named {name!r} in {storage.safe_url}: {then}")
    return study
