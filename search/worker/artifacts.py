"""Checkpoints every worker can reach, as Optuna artifacts (so optuna-dashboard lists them).

Two artifact stores, both implementing Optuna's `ArtifactStore` protocol:

- `DatabaseArtifactStore`: the study's own database (default on PostgreSQL), in chunks, one
  transaction per artifact. Several machines need nothing but the database URL.
- `DirectoryArtifactStore`: a directory (a shared volume, NFS; default beside a SQLite file);
  each artifact is written to a temporary file, fsync'ed and renamed into place.

`TrialCheckpoints` is the trainer's `CheckpointStore` for one trial. Each save writes a new
artifact, then moves the trial's pointer to it (system attribute ``hpsearch:checkpoint``, plus
Optuna's ``artifacts:<id>`` entry for the dashboard) in one transaction that checks the worker
still holds the trial, then deletes the previous artifact. A kill at any moment leaves the
pointer on a complete checkpoint; a worker that lost its trial cannot move the pointer.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import BinaryIO, Protocol

from optuna.artifacts import ArtifactMeta, FileSystemArtifactStore
from optuna.artifacts.exceptions import ArtifactNotFound

from search.db.artifacts import DatabaseArtifactStore
from search.db.checkpoint_pointers import POINTER_ATTR, drop_pointer, move_pointer, read_pointer
from search.db.leases import Claim
from search.db.storage import Storage, StorageError, retry
from search.errors import first_line
from search.study.studies import StudyRef
from trainer.checkpoint import CheckpointStore, atomic_write

__all__ = [
    "POINTER_ATTR",
    "ArtifactStore",
    "DirectoryArtifactStore",
    "TrialCheckpoints",
    "artifact_store_for",
    "existing_directory",
]

logger = logging.getLogger("search.worker.artifacts")


class ArtifactStore(Protocol):
    """Optuna's artifact store protocol (optuna.artifacts)."""

    def open_reader(self, artifact_id: str) -> BinaryIO: ...
    def write(self, artifact_id: str, content_body: BinaryIO) -> None: ...
    def remove(self, artifact_id: str) -> None: ...


class DirectoryArtifactStore(FileSystemArtifactStore):
    """Optuna's FileSystemArtifactStore, made crash-safe: temp file, fsync, rename."""

    def __init__(self, base_path: str | os.PathLike[str]) -> None:
        self.path = Path(base_path)
        self.path.mkdir(parents=True, exist_ok=True)
        super().__init__(self.path)

    def write(self, artifact_id: str, content_body: BinaryIO) -> None:
        atomic_write(Path(self._get_filepath(artifact_id)), content_body)

    def remove(self, artifact_id: str) -> None:
        with contextlib.suppress(FileNotFoundError, ArtifactNotFound):
            super().remove(artifact_id)

    def remove_prefix(self, prefix: str) -> None:
        for path in self.path.glob(f"{prefix}*"):
            with contextlib.suppress(OSError):
                path.unlink()


def artifact_store_for(storage: Storage, directory: str | None) -> ArtifactStore:
    """A directory if one is given, else the database on PostgreSQL, else beside the SQLite file.

    A given directory must exist (StorageError otherwise): a shared volume that is not mounted
    must not silently become a local directory no other machine sees.
    """
    if directory:
        return DirectoryArtifactStore(existing_directory(directory))
    if storage.is_postgres:
        return DatabaseArtifactStore(storage)
    db = storage.sqlite_path()
    assert db is not None
    return DirectoryArtifactStore(db.with_name(db.name + ".artifacts"))


def existing_directory(directory: str) -> str:
    """`directory` if it exists; else StorageError (exit 2). Never created here: a shared
    volume that is not mounted must not silently become a local directory that no other
    machine sees."""
    if not os.path.isdir(directory):
        raise StorageError(
            f"--artifacts {directory}: no such directory (is the shared volume mounted?)"
        )
    return directory


class TrialCheckpoints(CheckpointStore):
    """The latest checkpoint of one held trial, in an artifact store.

    `before_publish` runs after a checkpoint is stored and before the trial's pointer moves to
    it: the worker writes the trial's queued intermediate values there, so a checkpoint of
    epoch k is never published while values up to k exist only in a process that may die.
    """

    def __init__(
        self,
        store: ArtifactStore,
        storage: Storage,
        claim: Claim,
        study: StudyRef,
        *,
        before_publish: Callable[[], None] | None = None,
    ) -> None:
        self.store, self.storage, self.claim = store, storage, claim
        self.before_publish = before_publish
        # Unique across databases: two studies sharing a directory never touch each other's.
        # Hex digits and dashes only: optuna-dashboard serves no other artifact ids.
        self.prefix = f"{study.uid}-{claim.number}-"
        self._legacy_prefix = f"ckpt-{study.uid}-{claim.number}-"  # before the dashboard
        self.filename = f"{study.name}-trial-{claim.number}-checkpoint.pt"
        self.unreadable: str | None = None
        """Why the stored checkpoint could not be read, if the trial had to start over."""

    def write(self, data: BinaryIO) -> None:
        artifact_id = f"{self.prefix}{uuid.uuid4().hex[:12]}"
        started = time.monotonic()
        if isinstance(self.store, DatabaseArtifactStore):
            self.store.write(artifact_id, data, trial_id=self.claim.trial_id)
        else:
            self.store.write(artifact_id, data)
        meta = ArtifactMeta(artifact_id, self.filename, "application/octet-stream", None)
        pointer = {
            "artifact_id": artifact_id,
            "bytes": data.tell(),
            "saved_by": self.claim.worker_id,
            "write_s": round(time.monotonic() - started, 3),
        }
        try:
            if self.before_publish is not None:
                self.before_publish()
            # Optuna keeps artifact metadata as a JSON string inside the attribute.
            previous = move_pointer(self.storage, self.claim, pointer, json.dumps(asdict(meta)))
        except BaseException:
            with contextlib.suppress(Exception):
                self.store.remove(artifact_id)
            raise
        if previous:
            with contextlib.suppress(Exception):  # a leftover costs space, removed at the end
                self.store.remove(previous)

    def open(self) -> BinaryIO | None:
        # Waits out a database outage: starting over while a checkpoint exists would lose work.
        pointer = retry(
            lambda: read_pointer(self.storage, self.claim.trial_id),
            "read the checkpoint pointer",
        )
        if pointer is None:
            return None
        try:
            return retry(lambda: self.store.open_reader(pointer["artifact_id"]), "read it")
        except Exception as exc:  # missing, a permission, a bad file: the store's, not the trial's
            what = "missing" if isinstance(exc, ArtifactNotFound) else "unreadable"
            self.unreadable = (
                f"checkpoint {pointer['artifact_id']} {what} ({type(exc).__name__}: "
                f"{first_line(exc)}): the trial started over"
            )
            logger.warning("trial %d: %s", self.claim.number, self.unreadable)
            return None

    def discard(self) -> None:
        """Delete the trial's checkpoints (the trial is finished)."""
        drop_pointer(self.storage, self.claim.trial_id)
        remove_prefix = getattr(self.store, "remove_prefix", None)
        if remove_prefix is not None:
            remove_prefix(self.prefix)
            remove_prefix(self._legacy_prefix)
