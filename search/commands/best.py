"""`hpsearch best --study NAME`: the best finished trial, in forms to reuse.

Its value, params, epochs trained, number, when and where it ran; ``--json`` as one object;
``--format flags`` (``--set k=v`` flags that `hpsearch try` takes as they are) or ``--format
toml`` (a ``[params]`` block); ``--weights PATH`` writes its final model weights as a plain state
dict: ``model.load_state_dict(torch.load(PATH, weights_only=True))``.

Only COMPLETE trials count: a pruned, paused or failed trial is never the best, whatever its
last value. A study without one is exit 2, one line.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from search.commands.common import ARTIFACTS_HELP, add_storage_flags, artifacts_dir, storage_url
from search.db.checkpoint_pointers import read_pointer
from search.db.migrate import check_schema
from search.db.storage import Storage, open_storage
from search.db.trial_table import TrialRow, best_row, read_trials
from search.errors import EXIT_OK, RuntimeFailure
from search.study.reuse import as_flags, as_toml
from search.study.settings import ConfigError
from search.study.studies import StudyRef, open_study
from search.terminal import format_value

__all__ = ["add_parser", "best_json", "cmd_best", "find_best", "write_weights"]


def add_parser(sub: Any) -> None:
    best = sub.add_parser(
        "best",
        help="the best finished trial: value, params (to reuse), where it ran, its weights",
    )
    best.add_argument("--study", required=True, help="study name")
    add_storage_flags(best)
    best.add_argument("--json", action="store_true", help="one JSON object")
    best.add_argument(
        "--format",
        choices=("toml", "flags"),
        help="only the params: a [params] TOML block, or --set flags for `hpsearch try`",
    )
    best.add_argument(
        "--weights",
        metavar="PATH",
        help="write the best trial's final model weights (a state dict) to PATH",
    )
    best.add_argument("--artifacts", help=ARTIFACTS_HELP)
    best.set_defaults(handler=cmd_best)


def cmd_best(args: argparse.Namespace) -> int:
    if args.json and args.format:
        raise ConfigError("--json and --format: choose one")
    target = _weights_target(args.weights) if args.weights else None
    storage = open_storage(storage_url(args))
    try:
        check_schema(storage)
        study = open_study(storage, args.study)
        row = find_best(storage, study)
        if target is not None:
            size = write_weights(storage, study, row, target, artifacts_dir(args.artifacts))
    finally:
        storage.close()
    if args.json:
        print(json.dumps(best_json(study, row)))
    elif args.format == "flags":
        print(as_flags(row.params))
    elif args.format == "toml":
        print(as_toml(row.params))
    else:
        print(_describe(study, row))
    if target is not None:
        shown = f"{size / 1e6:.1f} MB" if size >= 1e6 else f"{size / 1e3:.1f} kB"
        say = f"trial {row.number}'s final weights ({shown}) written to {target}"
        # With --json/--format stdout is for machines: the note goes to stderr.
        print(say, file=sys.stderr if (args.json or args.format) else sys.stdout)
    return EXIT_OK


def find_best(storage: Storage, study: StudyRef) -> TrialRow:
    """The best COMPLETE trial; ConfigError (exit 2) if there is none yet."""
    rows = read_trials(storage, study.study_id)
    row = best_row(rows, study.config.study.direction)
    if row is None:
        counts = ", ".join(
            f"{n} {s.lower()}"
            for s in ("PAUSED", "RUNNING", "PRUNED", "FAIL", "WAITING")
            if (n := sum(r.state == s for r in rows))
        )
        raise ConfigError(
            f"study {study.name!r} has no complete trial yet"
            + (f" ({counts})" if counts else " (no trials)")
        )
    return row


def best_json(study: StudyRef, row: TrialRow) -> dict[str, Any]:
    return {
        "study": study.name,
        "metric": study.config.study.metric,
        "direction": study.config.study.direction,
        "number": row.number,
        "value": row.value,
        "params": row.params,
        "epochs_trained": row.epochs_trained if row.epochs_trained is not None else row.epoch,
        "hostname": row.hostname,
        "worker_id": row.worker,
        "device": row.user_attrs.get("device_name"),
        "started": _iso(row.started),
        "completed": _iso(row.completed),
        "resumed_from": row.resumed_from,
        "weights_kept": row.has_checkpoint,
    }


def _describe(study: StudyRef, row: TrialRow) -> str:
    info = best_json(study, row)
    where = " on ".join(
        x for x in (info["worker_id"] and f"worker {info['worker_id']}", info["hostname"]) if x
    )
    device = f" ({info['device']})" if info["device"] else ""
    lines = [
        f"study {study.name}: best trial {row.number}  {info['metric']} "
        f"{format_value(row.value)} ({info['direction']})",
        "  params: " + "  ".join(f"{k}={format_value(v)}" for k, v in row.params.items()),
        f"  epochs trained: {info['epochs_trained']}",
        f"  ran: {_when(row)}" + (f" by {where}{device}" if where else ""),
    ]
    if row.resumed_from:
        frm = row.resumed_from
        lines.append(
            f"  resumed from epoch {frm.get('epoch')} (worker {frm.get('worker_id') or '-'})"
        )
    lines.append(f"  again: hpsearch try CONFIG --best {study.name} [--epochs N]")
    if row.has_checkpoint:
        lines.append(f"  weights: hpsearch best --study {study.name} --weights model.pt")
    return "\n".join(lines)


def _when(row: TrialRow) -> str:
    if row.started is None:
        return "-"
    start = row.started.strftime("%Y-%m-%d %H:%M:%S")
    if row.completed is None:
        return f"{start} UTC"
    seconds = (row.completed - row.started).total_seconds()
    return f"{start} UTC for {seconds:.0f} s"


def _iso(when: datetime.datetime | None) -> str | None:
    return None if when is None else when.replace(tzinfo=datetime.UTC).isoformat()


def _weights_target(path: str) -> Path:
    """--weights PATH, checked before anything is read: its folder must exist."""
    target = Path(path)
    if target.is_dir():
        raise ConfigError(f"--weights {path}: is a directory; give a file name, e.g. model.pt")
    if not target.parent.is_dir():
        raise ConfigError(f"--weights {path}: no such directory {str(target.parent)!r}")
    return target


def write_weights(
    storage: Storage, study: StudyRef, row: TrialRow, target: Path, directory: str | None
) -> int:
    """Write the trial's final model weights (the ``model`` entry of its last checkpoint) to
    `target` as a plain state dict, atomically; returns the bytes written."""
    from search.worker.artifacts import artifact_store_for

    pointer = read_pointer(storage, row.trial_id)
    if pointer is None:
        raise RuntimeFailure(
            f"trial {row.number}'s weights were not kept (the study ran before hpsearch kept "
            "the best trial's checkpoint, or its checkpoints were cleaned up); train it again "
            f"with `hpsearch try CONFIG --best {study.name} --checkpoint-dir DIR`"
        )
    import torch  # only here: the other forms of `best` answer without loading torch

    store = artifact_store_for(storage, directory)
    try:
        reader = store.open_reader(pointer["artifact_id"])
    except Exception as exc:
        where = f"--artifacts {directory}" if directory else "the study's artifact store"
        raise RuntimeFailure(
            f"trial {row.number}'s checkpoint {pointer['artifact_id']} is not in {where} "
            f"({type(exc).__name__}); give --artifacts DIR if its workers used one"
        ) from None
    from trainer.checkpoint import CheckpointError, consolidated_state_dict

    # One plain state dict, whether the trial ran in one process or sharded (FSDP) over several.
    try:
        with reader:
            weights = consolidated_state_dict(reader)
    except CheckpointError as exc:
        raise RuntimeFailure(f"trial {row.number}'s checkpoint: {exc}") from None
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(handle, "wb") as out:
            torch.save(weights, out)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return target.stat().st_size
