"""Creating and opening studies: the config is stored in the study, so workers need only its name.

Only `create` (and `run`, which creates) writes a study; workers load it (STYLE rule 8).
"""

from __future__ import annotations

import json
import logging
import time
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

import sqlalchemy as sa

from search.config import ConfigError, StudyConfig
from search.storage import Storage, StorageError

if TYPE_CHECKING:
    import optuna

__all__ = [
    "CONFIG_ATTR",
    "StudyRef",
    "create_study",
    "find_study",
    "load_optuna_study",
    "open_study",
]

logger = logging.getLogger("search.study")

CONFIG_ATTR = "hpsearch:config"
"""Study system attribute holding the canonical config JSON."""


@dataclass(frozen=True)
class StudyRef:
    """A study in a storage, with its config."""

    study_id: int
    name: str
    config: StudyConfig


def create_study(storage: Storage, config: StudyConfig) -> tuple[StudyRef, bool]:
    """Create the study, or return the existing one if its config is the same.

    Returns (study, created). A study of that name with a different config is a ConfigError.
    """
    import optuna

    from search.migrate import upgrade

    upgrade(storage)
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
            storage.optuna_storage().set_study_system_attr(
                study._study_id, CONFIG_ATTR, config.to_dict()
            )
            logger.info("created study %r in %s", name, storage.safe_url)
            ref = StudyRef(study._study_id, name, config)
            _queue_first_trials(storage, ref)
            return ref, True
    if existing is None:
        raise ConfigError(
            f"study {name!r} exists in {storage.safe_url} but is not an hpsearch study"
        )
    diff = existing.config.difference(config)
    if diff is not None:
        raise ConfigError(
            f"study {name!r} already exists with a different config ({diff}); "
            "use another study.name or the same config"
        )
    return existing, False


def _queue_first_trials(storage: Storage, study: StudyRef) -> None:
    """Sample the first trials now, for samplers whose points do not depend on results, so that
    the first workers start at once instead of racing each other to sample."""
    import os
    import socket
    import uuid

    from search.dispatch import Queue
    from search.samplers import LEARNS_FROM_RESULTS
    from search.sampling import PREFILL, TrialSampler

    if study.config.study.sampler in LEARNS_FROM_RESULTS:
        return
    # Registered like a worker: should `create` die while sampling, its trials are reaped.
    creator = f"create-{socket.gethostname()[:40]}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    queue = Queue(storage, study.study_id, creator)
    queue.register(hostname=socket.gethostname(), pid=os.getpid(), device="-", grace_s=60.0)
    try:
        TrialSampler(storage, study, queue).top_up(
            at_least=min(PREFILL, study.config.study.n_trials)
        )
    finally:
        queue.unregister("created the study")


def find_study(storage: Storage, name: str, *, wait_s: float = 0.0) -> StudyRef | None:
    """The hpsearch study called `name`, or None. With wait_s, wait for a study being created to
    get its config (Optuna creates the study and its attributes in separate transactions)."""
    deadline = time.monotonic() + wait_s
    while True:
        with storage.autocommit() as conn:
            row = conn.execute(
                sa.text(
                    "SELECT s.study_id, a.value_json FROM studies s LEFT JOIN "
                    "study_system_attributes a ON a.study_id = s.study_id AND a.key = :k "
                    "WHERE s.study_name = :n"
                ),
                {"n": name, "k": CONFIG_ATTR},
            ).first()
        if row is not None and row[1] is not None:
            return StudyRef(row[0], name, StudyConfig.from_dict(json.loads(row[1])))
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
        raise StorageError(
            f"no hpsearch study named {name!r} in {storage.safe_url}: "
            "create it first with `hpsearch create CONFIG`"
        )
    return study


def load_optuna_study(
    storage: Storage, study: StudyRef, sampler: optuna.samplers.BaseSampler | None = None
) -> optuna.Study:
    """The Optuna study object (for sampling and pruning), on this process's cached storage."""
    import optuna

    from search.pruners import make_pruner

    return optuna.load_study(
        study_name=study.name,
        storage=storage.optuna_storage(),
        sampler=sampler or optuna.samplers.RandomSampler(),
        pruner=make_pruner(study.config),
    )
