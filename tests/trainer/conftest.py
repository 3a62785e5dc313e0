"""The trainer's fixtures (its toy tasks are in `tests.helpers.toy_task`)."""

from __future__ import annotations

from typing import Any

import pytest

from trainer import DirectoryCheckpointStore


@pytest.fixture
def store(tmp_path: Any) -> DirectoryCheckpointStore:
    return DirectoryCheckpointStore(tmp_path / "checkpoint")
