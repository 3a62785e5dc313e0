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

A sharded trial (``[train] sharding = "fsdp"`` on K ranks) writes a sharded checkpoint: the same
bytes-in-a-store, as one uncompressed tar archive of ::

    state.pt      the dict above without "model" and "optimizer" (torch.save, rank 0)
    shards/       model and optimizer state as torch.distributed.checkpoint wrote them:
                  .metadata (what is where) and __R_0.distcp (rank R's shard, written by R)

Every rank writes its shard with ``torch.distributed.checkpoint.save``, which returns only after
all ranks have written theirs and rank 0 the metadata; only then does rank 0 pack the archive
and hand it to the store, whose write moves the trial's pointer. Reading it back reshards: any
number of ranks (or one plain process) reads the slices it needs (`read_shards`);
`consolidated_state_dict` gives the full weights of either kind. DCP's own reader unpickles its
metadata and non-tensor values with no restriction; here they go through a restricted
unpickler and ``weights_only=True``, as every other checkpoint read.

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
import pickle
import shutil
import tarfile
import tempfile
import warnings
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, BinaryIO

__all__ = [
    "CheckpointError",
    "CheckpointStore",
    "DirectoryCheckpointStore",
    "ShardedCheckpoint",
    "consolidated_state_dict",
    "pack_sharded",
    "read_shards",
    "run_fingerprint",
    "write_shards",
]

STATE_FILE = "state.pt"
"""In a sharded checkpoint's archive: everything but the model and optimizer state."""
SHARDS_DIR = "shards"
"""In a sharded checkpoint's archive: the torch.distributed.checkpoint directory."""


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
        stream = self.open()
        if stream is None:
            return None
        with stream:
            if not stream.seekable():  # torch.load needs to seek in the zip archive
                stream = io.BytesIO(stream.read())
            if _is_tar(stream):
                return _unpack_sharded(stream)
            state = _torch_load(stream)
        return state

    def save_sharded(self, state: dict[str, Any], shards: dict[str, Any]) -> int:
        """A sharded checkpoint: called on every rank of a sharded trial with this rank's
        `shards`; returns the bytes written (0 on ranks that hand nothing to a store).
        Only a store shared by the ranks of one group can (`trainer.distributed`)."""
        raise NotImplementedError(f"{type(self).__name__} cannot store a sharded checkpoint")


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


class ShardedCheckpoint:
    """A sharded checkpoint unpacked into a temporary directory, deleted with this object."""

    def __init__(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="hpsearch-shards-")
        self.path = Path(self._tmp.name)

    @property
    def shards(self) -> Path:
        return self.path / SHARDS_DIR

    def __repr__(self) -> str:
        return f"ShardedCheckpoint({str(self.path)!r})"


def write_shards(directory: Path, shards: dict[str, Any]) -> None:
    """Every rank: write this rank's `shards` into `directory` (one directory all ranks see).
    Returns when every rank has written its shard and rank 0 the metadata; raises on every rank
    if any rank failed."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    try:
        dcp.save(shards, storage_writer=dcp.FileSystemWriter(directory / SHARDS_DIR))
    except CheckpointException as exc:  # a BaseException: the loop's handlers would miss it
        raise OSError(f"sharded checkpoint not written ({_dcp_reason(exc)})") from None


def pack_sharded(directory: Path, state: dict[str, Any], archive: Path) -> None:
    """Rank 0, after `write_shards`: the archive a store keeps (see the module docstring)."""
    import torch

    torch.save(state, directory / STATE_FILE)
    with tarfile.open(archive, "w") as tar:  # uncompressed: tensors hardly compress
        tar.add(directory / STATE_FILE, arcname=STATE_FILE)
        tar.add(directory / SHARDS_DIR, arcname=SHARDS_DIR)


def read_shards(checkpoint: ShardedCheckpoint, model: Any, optimizer: Any) -> None:
    """Load a sharded checkpoint's model and optimizer state into `model` and `optimizer`
    (sharded on any number of ranks, or plain in one process): each rank reads the slices of
    the saved shards that it now owns."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optimizer": optimizer_state}
    reader, planner, _ = _dcp_classes()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "no process group: assuming one process", indeed
            dcp.load(
                state,
                storage_reader=reader(checkpoint.shards),
                planner=planner(),
                no_dist=not dist.is_initialized(),  # one plain process reads it all
            )
    except (Exception, CheckpointException) as exc:  # DCP's is a BaseException
        raise CheckpointError(f"cannot read the sharded checkpoint ({_dcp_reason(exc)})") from exc
    set_state_dict(
        model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"]
    )


def consolidated_state_dict(source: str | os.PathLike[str] | BinaryIO) -> dict[str, Any]:
    """The model's full state dict (plain CPU tensors, as ``model.state_dict()`` of the
    unwrapped model) from a checkpoint file or stream, sharded or not; in one process, with no
    process group. Raises `CheckpointError` for anything else.

    Example (the best trial's weights, as ``hpsearch best --weights`` writes them)::

        torch.save(consolidated_state_dict("trial-7-checkpoint.pt"), "best.pt")
    """
    with contextlib.ExitStack() as stack:
        if isinstance(source, (str, os.PathLike)):
            stream: BinaryIO = stack.enter_context(open(source, "rb"))
        else:
            stream = source
        if not stream.seekable():
            stream = io.BytesIO(stream.read())
        state = _unpack_sharded(stream) if _is_tar(stream) else _torch_load(stream)
    checkpoint = state.get("shards")
    if checkpoint is None:
        if not isinstance(state.get("model"), dict):
            raise CheckpointError("the checkpoint holds no model state dict")
        return state["model"]
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    reader, _, empty_planner = _dcp_classes()
    full: dict[str, Any] = {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "no process group: assuming one process", indeed
            # What dcp's own _load_state_dict_from_keys does, with the restricted reader.
            _load_state_dict(
                full,
                storage_reader=reader(checkpoint.shards),
                planner=empty_planner(keys={"model"}),
                no_dist=True,
            )
    except (Exception, CheckpointException) as exc:  # DCP's is a BaseException
        raise CheckpointError(f"cannot read the sharded checkpoint ({_dcp_reason(exc)})") from exc
    if not isinstance(full.get("model"), dict):
        raise CheckpointError("the sharded checkpoint holds no model state")
    return full["model"]


def _is_tar(stream: BinaryIO) -> bool:
    start = stream.tell()
    head = stream.read(262)
    stream.seek(start)
    return head[257:262] == b"ustar"


def _torch_load(stream: BinaryIO) -> dict[str, Any]:
    import torch  # `import trainer` does not load torch

    try:
        state = torch.load(stream, map_location="cpu", weights_only=True)
    except Exception as exc:  # a refused pickle, a truncated zip, ...: all mean unusable
        raise CheckpointError(f"cannot load checkpoint ({_first_line(exc)})") from exc
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint holds a {type(state).__name__}, not a state dict")
    return state


def _unpack_sharded(stream: BinaryIO) -> dict[str, Any]:
    """A sharded checkpoint's state, with "shards" the unpacked `ShardedCheckpoint`."""
    checkpoint = ShardedCheckpoint()
    try:
        with tarfile.open(fileobj=stream, mode="r:") as tar:
            tar.extractall(checkpoint.path, filter="data")  # no links out, no absolute paths
        with open(checkpoint.path / STATE_FILE, "rb") as f:
            state = _torch_load(f)
    except (tarfile.TarError, OSError) as exc:
        raise CheckpointError(f"cannot unpack sharded checkpoint ({_first_line(exc)})") from exc
    if not (checkpoint.shards / ".metadata").is_file():
        raise CheckpointError("sharded checkpoint without shards/.metadata")
    state["shards"] = checkpoint
    return state


def _dcp_reason(exc: BaseException) -> str:
    """The first rank's failure inside DCP's CheckpointException, in one line."""
    failures = getattr(exc, "failures", None)
    if isinstance(failures, dict) and failures:
        inner = next(iter(failures.values()))
        if isinstance(inner, tuple):  # (exception, its traceback summary)
            inner = inner[0]
        parts = _first_line(inner).split("; ")
        # "metadata is None; global metadata read failed: WHY; rank local ...": say WHY.
        return next((p for p in parts if "global metadata read failed" in p), parts[0])
    return _first_line(exc)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


class _MetadataUnpickler(pickle.Unpickler):
    """DCP's .metadata holds dataclasses of torch.distributed.checkpoint, sizes, dtypes,
    layouts and the path it was written to: nothing else is let in (DCP itself uses a bare
    pickle.load)."""

    def find_class(self, module: str, name: str) -> Any:
        import torch

        allowed = (
            module.startswith("torch.distributed.checkpoint.")
            or (module, name) in (("torch", "Size"), ("torch.serialization", "_get_layout"))
            or (module == "torch" and isinstance(getattr(torch, name, None), torch.dtype))
            or (module == "collections" and name == "OrderedDict")
            or (module == "pathlib" and name in ("Path", "PosixPath", "PurePosixPath"))
        )
        if not allowed:
            raise pickle.UnpicklingError(f"{module}.{name} is not allowed in checkpoint metadata")
        return super().find_class(module, name)


@functools.cache
def _dcp_classes() -> tuple[type, type, type]:
    """torch.distributed.checkpoint's reader and load planners, reading as every other
    checkpoint read does: metadata through `_MetadataUnpickler`, non-tensor values (optimizer
    hyperparameters, ...) with weights_only=True (DCP's own planner uses weights_only=False)."""
    import torch
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint._traverse import set_element
    from torch.distributed.checkpoint.default_planner import (
        DefaultLoadPlanner,
        _EmptyStateDictLoadPlanner,
    )
    from torch.distributed.checkpoint.metadata import StorageMeta

    class Reader(FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            path = self._get_metadata_path(kwargs.get("rank"))
            with self.fs.create_stream(path, "rb") as f:
                metadata = _MetadataUnpickler(f).load()
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    class Planner(DefaultLoadPlanner):
        def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
            obj = torch.load(value, weights_only=True)
            if self.flatten_state_dict:
                set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], obj)
            else:
                self.state_dict[read_item.dest_index.fqn] = obj

    class EmptyPlanner(_EmptyStateDictLoadPlanner):
        load_bytes = Planner.load_bytes

    return Reader, Planner, EmptyPlanner
