"""`hpsearch trials --study NAME [--state S] [--json]`: every trial of a study, one line each
(number, state, value, rung or epoch, params, worker); and the CSV table `hpsearch export --to
csv` writes (`write_csv`)."""

from __future__ import annotations

import argparse
import csv
import datetime
import json
from collections.abc import Sequence
from typing import IO, Any

from search.commands.common import add_storage_flags, storage_url
from search.db.migrate import check_schema
from search.db.storage import open_storage
from search.db.trial_table import STATES, TrialRow, read_trials
from search.errors import EXIT_OK
from search.study.studies import StudyRef, open_study
from search.terminal import format_value

__all__ = ["CSV_COLUMNS", "add_parser", "cmd_trials", "format_trials", "trial_json", "write_csv"]


def add_parser(sub: Any) -> None:
    trials = sub.add_parser(
        "trials", help="every trial of a study: state, value, rung or epoch, params, worker"
    )
    trials.add_argument("--study", required=True, help="study name")
    add_storage_flags(trials)
    trials.add_argument(
        "--state",
        type=_state,
        metavar="STATE",
        help="only trials in this state: " + ", ".join(s.lower() for s in STATES),
    )
    trials.add_argument("--json", action="store_true", help="one JSON list, a object per trial")
    trials.set_defaults(handler=cmd_trials)


def _state(text: str) -> str:
    state = text.strip().upper()
    if state == "FAILED":
        state = "FAIL"
    if state not in STATES:
        raise argparse.ArgumentTypeError(
            f"unknown state {text!r} (one of {', '.join(s.lower() for s in STATES)})"
        )
    return state


def cmd_trials(args: argparse.Namespace) -> int:
    storage = open_storage(storage_url(args))
    try:
        check_schema(storage)
        study = open_study(storage, args.study)
        rows = read_trials(storage, study.study_id)
    finally:
        storage.close()
    if args.state:
        rows = [r for r in rows if r.state == args.state]
    if args.json:
        print(json.dumps([trial_json(r) for r in rows]))
    else:
        print(format_trials(study, rows))
    return EXIT_OK


def trial_json(row: TrialRow) -> dict[str, Any]:
    return {
        "number": row.number,
        "state": row.state,
        "value": row.value,
        "epoch": row.epoch,
        "rung": row.rung,
        "params": row.params,
        "worker_id": row.worker,
        "hostname": row.hostname,
        "epochs_trained": row.epochs_trained,
        "resumed_from": row.resumed_from,
        "started": _iso(row.started),
        "completed": _iso(row.completed),
        "ended_by": row.ended_by,
    }


def format_trials(study: StudyRef, rows: Sequence[TrialRow]) -> str:
    metric = study.config.study.metric
    if not rows:
        return f"study {study.name}: no trials"
    header = f"{'trial':>5}  {'state':<8}  {metric[:12]:>12}  {'epoch':>5}  {'rung':>4}  worker"
    lines = [header]
    for r in rows:
        worker = r.worker or "-"
        if r.hostname and r.hostname not in worker:
            worker = f"{worker}@{r.hostname}"
        params = "  ".join(f"{k}={format_value(v)}" for k, v in r.params.items())
        lines.append(
            f"{r.number:>5}  {r.state.lower():<8}  {format_value(r.value):>12}  "
            f"{'-' if r.epoch is None else r.epoch:>5}  {'-' if r.rung is None else r.rung:>4}  "
            f"{worker}  {params}".rstrip()
        )
    return "\n".join(lines)


CSV_COLUMNS = (
    "number",
    "state",
    "value",
    "epochs",
    "rung",
    "worker_id",
    "hostname",
    "started",
    "completed",
    "duration_s",
    "ended_by",
    "resumed",
)
"""The CSV's columns, then one ``params_<name>`` column per hyperparameter (as Optuna's
trials_dataframe names them)."""


def write_csv(rows: Sequence[TrialRow], out: IO[str], param_names: Sequence[str]) -> None:
    """One row per trial; empty cells for what a trial does not have (pandas reads NaN)."""
    writer = csv.writer(out)
    writer.writerow([*CSV_COLUMNS, *(f"params_{name}" for name in param_names)])
    for r in rows:
        duration = (
            (r.completed - r.started).total_seconds()
            if r.started is not None and r.completed is not None
            else None
        )
        epochs = r.epochs_trained if r.epochs_trained is not None else r.epoch
        cells = [
            r.number,
            r.state,
            r.value,
            epochs,
            r.rung,
            r.worker,
            r.hostname,
            _iso(r.started),
            _iso(r.completed),
            None if duration is None else round(duration, 3),
            r.ended_by,
            r.resumed_from is not None,
            *(r.params.get(name) for name in param_names),
        ]
        writer.writerow(["" if c is None else c for c in cells])


def _iso(when: datetime.datetime | None) -> str | None:
    return None if when is None else when.replace(tzinfo=datetime.UTC).isoformat()
