"""Where a trial's latest checkpoint lives, and how it is written and read.

A `CheckpointStore` moves bytes; `save` and `load` turn a state dict into those bytes and back
with ``torch.save`` and ``torch.load(weights_only=True)``. The store here keeps the checkpoint in
a directory (a local disk or a shared volume); the search side adds stores that keep it in the
study's database, so that a trial preempted on one machine resumes on another.

What a checkpoint holds (written by ``trainer.loop``), split by concern as in torchtitan::

    {"format": 2, "fingerprint": str,           # which run this is (params + config + data)
     "model": ..., "optimizer": ..., "scheduler": ..., "scaler": ... | None,
     "train_state": TrainState.state_dict()}    # loop, memory fitting, data order, RNG
                                                # (trainer.train_state: one place for its layout)

Everything in it is a tensor or a plain container of numbers and strings, so it loads with
``weights_only=True``: a checkpoint that needs arbitrary unpickling is refused, never executed.

This module does not import torch until a checkpoint is saved or loaded, so that the search side
can define its stores without loading torch.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import os
import shutil
import tempfile
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, BinaryIO

__all__ = ["CheckpointError", "CheckpointStore", "DirectoryCheckpointStore", "run_fingerprint"]


class CheckpointError(Exception):
    """A stored checkpoint that cannot be used: unreadable, truncated, or not weights-only."""


class CheckpointStore(ABC):
    """The latest checkpoint of one trial, as bytes; subclasses implement write, open, discard.

    Example (a store that keeps the checkpoint in memory)::

        class MemoryStore(CheckpointStore):
            def __init__(self):
                self.data = None
            def write(self, data):
                self.data = data.read()
            def open(self):
                return None if self.data is None else io.BytesIO(self.data)
            def discard(self):
                self.data = None

    Caveat: `write` must replace the previous checkpoint atomically (a reader sees the old bytes
    or the new, never a mix), because a trial can be killed in the middle of a write. It may
    raise on a transient failure; the trainer logs it and goes on training.
    """

    @abstractmethod
    def write(self, data: BinaryIO) -> None:
        """Atomically replace the stored checkpoint with the bytes read from `data`."""

    @abstractmethod
    def open(self) -> BinaryIO | None:
        """The stored checkpoint for reading (the caller closes it), or None if there is none."""

    @abstractmethod
    def discard(self) -> None:
        """Delete the stored checkpoint, if any (e.g. once the trial is finished)."""

    def save(self, state: dict[str, Any]) -> int:
        """Serialize `state` with ``torch.save`` and `write` it; returns the bytes written."""
        import torch  # `import trainer` does not load torch

        buffer = io.BytesIO()
        torch.save(state, buffer)
        size = buffer.tell()
        buffer.seek(0)
        self.write(buffer)
        return size

    def load(self) -> dict[str, Any] | None:
        """The stored state, or None if there is none.

        Loads with ``torch.load(weights_only=True)`` only: tensors and plain containers. Raises
        `CheckpointError` for a checkpoint that is corrupt or would need arbitrary unpickling.
        """
        import torch  # `import trainer` does not load torch

        stream = self.open()
        if stream is None:
            return None
        with stream:
            if not stream.seekable():  # torch.load needs to seek in the zip archive
                stream = io.BytesIO(stream.read())
            try:
                state = torch.load(stream, map_location="cpu", weights_only=True)
            except Exception as exc:  # a refused pickle, a truncated zip, ...: all mean unusable
                first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise CheckpointError(f"cannot load checkpoint ({first_line})") from exc
        if not isinstance(state, dict):
            raise CheckpointError(f"checkpoint holds a {type(state).__name__}, not a state dict")
        return state


class DirectoryCheckpointStore(CheckpointStore):
    """Keeps the latest checkpoint as ``DIRECTORY/checkpoint.pt``; only the latest is kept.

    A write goes to a temporary file in the same directory, is fsync'ed and then renamed over
    the old one (``os.replace`` is atomic on POSIX and Windows), so a kill at any moment leaves
    either the previous checkpoint or the new one.
    """

    filename = "checkpoint.pt"

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.path = self.directory / self.filename

    def __repr__(self) -> str:
        return f"DirectoryCheckpointStore({str(self.directory)!r})"

    def write(self, data: BinaryIO) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, data)

    def open(self) -> BinaryIO | None:
        try:
            return open(self.path, "rb")  # the caller closes it
        except FileNotFoundError:
            return None

    def discard(self) -> None:
        self.path.unlink(missing_ok=True)


def run_fingerprint(
    task: str, params: dict[str, Any], config: dict[str, Any], data_fingerprint: str
) -> str:
    """A stable hash of what makes two runs the same run: task, params, config and data.

    A checkpoint whose fingerprint differs from the current run's belongs to another run and is
    never resumed from.
    """
    identity = {"task": task, "params": params, "config": config, "data": data_fingerprint}
    text = json.dumps(identity, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def atomic_write(target: Path, data: BinaryIO) -> None:
    """Write `data` to `target` so that a kill at any moment leaves the old file or the new one.

    A temporary file in the same directory is written, fsync'ed, given the mode an ordinary new
    file gets under this process's umask (``mkstemp`` makes it 0600, which workers running as
    other users of a shared volume could not read), renamed over `target` and the directory
    fsync'ed, so that the rename itself survives a power cut.
    """
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            shutil.copyfileobj(data, out, 1 << 20)
            out.flush()
            os.fchmod(out.fileno(), 0o666 & ~_umask())
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_directory(target.parent)


@functools.cache
def _umask() -> int:
    """This process's umask, read once (Linux reports it; elsewhere reading it means setting it
    for an instant, done once at the first write)."""
    with contextlib.suppress(OSError, ValueError, StopIteration), open("/proc/self/status") as f:
        return int(next(line for line in f if line.startswith("Umask:")).split()[1], 8)
    current = os.umask(0o022)
    os.umask(current)
    return current


def _fsync_directory(directory: Path) -> None:
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
