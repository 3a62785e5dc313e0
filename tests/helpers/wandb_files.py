"""Reading the run files W&B writes offline (``run-<id>.wandb``), for the tests.

wandb 0.31 has no Python reader of its own any more (the old ``wandb.sdk.internal.datastore``
went with the move of its internals to wandb-core), so the framing is read here: a 7-byte
header (``:W&B``, magic 0xBEE1, version 0) and LevelDB's log format (32 KiB blocks; records
of crc32c, length, type FULL/FIRST/MIDDLE/LAST). Each record is decoded with wandb's own
protobuf schema, ``wandb.proto.wandb_internal_pb2.Record``.
"""

from __future__ import annotations

import json
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wandb.proto import wandb_internal_pb2

BLOCK = 32 * 1024
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> list[wandb_internal_pb2.Record]:
    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    out, pos, parts = [], HEADER, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # the block's tail is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        if length == 0 and kind == 0:  # zero padding at the end
            pos += left
            continue
        chunk = data[pos + HEADER : pos + HEADER + length]
        pos += HEADER + length
        if kind in (FULL, FIRST):
            parts = chunk
        else:
            parts += chunk
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(parts)
            out.append(record)
    return out


@dataclass
class OfflineRun:
    """What one run file holds, as W&B would show it."""

    run_id: str
    group: str
    name: str
    config: dict[str, Any] = field(default_factory=dict)
    history: dict[int, dict[str, Any]] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    exit_code: int | None = None
    preempting: bool = False


def read_run(path: Path) -> OfflineRun:
    run: OfflineRun | None = None
    for record in records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            r = record.run
            if run is None:
                run = OfflineRun(run_id=r.run_id, group=r.run_group, name=r.display_name)
            run.tags = list(r.tags)
            for item in r.config.update:
                run.config[item.key] = json.loads(item.value_json)
        if run is None:  # the file's header record
            continue
        if kind == "config":
            for item in record.config.update:
                value = json.loads(item.value_json)
                if isinstance(value, dict) and isinstance(run.config.get(item.key), dict):
                    run.config[item.key] = {**run.config[item.key], **value}
                else:
                    run.config[item.key] = value
        elif kind == "history":
            row = {_key(i): json.loads(i.value_json) for i in record.history.item}
            run.history[record.history.step.num] = row
        elif kind == "summary":
            for item in record.summary.update:
                run.summary[_key(item)] = json.loads(item.value_json)
        elif kind == "exit":
            run.exit_code = record.exit.exit_code
        elif kind == "preempting":
            run.preempting = True
    assert run is not None, f"{path}: no run record"
    return run


def _key(item: Any) -> str:
    return item.key or ".".join(item.nested_key)


def offline_runs(wandb_dir: Path, expect: int = 0, timeout_s: float = 30.0) -> list[OfflineRun]:
    """Every offline run file under $WANDB_DIR/wandb, oldest first, once there are `expect`
    and each is complete (wandb-core may still be writing when `finish()` has returned)."""
    deadline = time.monotonic() + timeout_s
    while True:
        paths = sorted(wandb_dir.glob("wandb/offline-run-*/run-*.wandb"))
        kinds = [{r.WhichOneof("record_type") for r in records(p)} for p in paths]
        complete = len(paths) >= expect and all("run" in k and "exit" in k for k in kinds)
        if complete or time.monotonic() > deadline:
            return [read_run(p) for p in paths]
        time.sleep(0.2)
