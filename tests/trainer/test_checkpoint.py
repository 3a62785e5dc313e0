"""trainer.checkpoint: atomic directory store, weights-only loading, run fingerprints."""

from __future__ import annotations

import io
import logging
import stat
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.toy_task import ToyTask
from trainer import CheckpointError, CheckpointStore, DirectoryCheckpointStore, TrainConfig, train
from trainer.checkpoint import run_fingerprint


def _touch(path: str) -> None:
    Path(path).touch()


class Payload:
    """Unpickling this would run code: it creates a file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (_touch, (str(self.marker),))


def test_save_load_round_trip_keeps_only_the_latest(tmp_path: Path) -> None:
    store = DirectoryCheckpointStore(tmp_path / "run")
    assert store.load() is None
    size = store.save({"weights": torch.arange(4.0), "epoch": 1})
    assert size == (tmp_path / "run" / "checkpoint.pt").stat().st_size
    store.save({"weights": torch.ones(2), "epoch": 2})
    state = store.load()
    assert state["epoch"] == 2 and torch.equal(state["weights"], torch.ones(2))
    assert [p.name for p in (tmp_path / "run").iterdir()] == ["checkpoint.pt"]  # no temp files
    store.discard()
    assert store.load() is None
    store.discard()  # idempotent


def test_a_failed_write_leaves_the_previous_checkpoint_intact(tmp_path: Path) -> None:
    store = DirectoryCheckpointStore(tmp_path)
    store.save({"epoch": 1})

    class Broken(io.RawIOBase):
        def readable(self) -> bool:
            return True

        def readinto(self, buffer: Any) -> int:
            raise OSError("disk went away")

    with pytest.raises(OSError, match="disk went away"):
        store.write(Broken())
    assert store.load() == {"epoch": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]


def test_a_checkpoint_that_needs_unpickling_is_refused_not_executed(tmp_path: Path) -> None:
    marker = tmp_path / "code-ran"
    store = DirectoryCheckpointStore(tmp_path / "run")
    buffer = io.BytesIO()
    torch.save({"model": {}, "extra": Payload(marker)}, buffer)
    buffer.seek(0)
    store.write(buffer)
    with pytest.raises(CheckpointError, match="cannot load checkpoint"):
        store.load()
    assert not marker.exists()


def test_train_ignores_a_refused_or_corrupt_checkpoint(tmp_path: Path, caplog: Any) -> None:
    store = DirectoryCheckpointStore(tmp_path)
    store.write(io.BytesIO(b"not a checkpoint"))
    with caplog.at_level(logging.WARNING, logger="trainer"):
        result = train(ToyTask(), {"batch_size": 32}, TrainConfig(epochs=1), checkpoints=store)
    assert result.status == "completed" and result.resumed_from is None
    assert "cannot load checkpoint" in caplog.text and "starting from scratch" in caplog.text
    assert store.load()["train_state"]["loop"]["epoch"] == 1  # replaced by a good one


def test_a_store_is_three_byte_methods(tmp_path: Path) -> None:
    class MemoryStore(CheckpointStore):
        def __init__(self) -> None:
            self.data: bytes | None = None

        def write(self, data: Any) -> None:
            self.data = data.read()

        def open(self) -> Any:
            return None if self.data is None else io.BytesIO(self.data)

        def discard(self) -> None:
            self.data = None

    store = MemoryStore()
    first = train(
        ToyTask(),
        {"batch_size": 32},
        TrainConfig(epochs=2),
        checkpoints=store,
        report=lambda epoch, metric: epoch == 1,
    )
    assert first.status == "pruned" and store.data
    second = train(ToyTask(), {"batch_size": 32}, TrainConfig(epochs=2), checkpoints=store)
    assert second.resumed_from == {"epoch": 1, "step": 0} and second.epochs_run == 2


def test_run_fingerprint_depends_on_every_part() -> None:
    base = run_fingerprint("t:f", {"lr": 0.1}, {"epochs": 3}, "data")
    assert base == run_fingerprint("t:f", {"lr": 0.1}, {"epochs": 3}, "data")
    assert (
        len(
            {
                base,
                run_fingerprint("t:g", {"lr": 0.1}, {"epochs": 3}, "data"),
                run_fingerprint("t:f", {"lr": 0.2}, {"epochs": 3}, "data"),
                run_fingerprint("t:f", {"lr": 0.1}, {"epochs": 4}, "data"),
                run_fingerprint("t:f", {"lr": 0.1}, {"epochs": 3}, "other data"),
            }
        )
        == 5
    )


def test_a_checkpoint_file_gets_the_mode_of_an_ordinary_new_file(tmp_path: Path) -> None:
    # mkstemp alone makes 0600: workers running as other users of a shared volume could not read.
    reference = tmp_path / "reference"
    reference.write_bytes(b"")  # what this process's umask gives an ordinary new file
    store = DirectoryCheckpointStore(tmp_path / "store")
    store.write(io.BytesIO(b"state"))
    assert stat.S_IMODE((tmp_path / "store" / "checkpoint.pt").stat().st_mode) == stat.S_IMODE(
        reference.stat().st_mode
    )
    assert [p.name for p in (tmp_path / "store").iterdir()] == ["checkpoint.pt"]  # no temp file
