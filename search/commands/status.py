"""`hpsearch status` (one study: trials by state, the best, who runs what; `--watch`: live) and
`hpsearch workers` (every worker of every machine)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from search.commands.common import add_storage_flags, from_value_error, storage_url
from search.db.migrate import check_schema
from search.db.storage import open_storage
from search.errors import EXIT_OK
from search.monitor.status import format_status, study_status
from search.monitor.watch import DEFAULT_INTERVAL_S, watch
from search.monitor.workers import format_workers, list_workers, workers_json
from search.study.settings import ConfigError
from search.study.studies import open_study

__all__ = ["add_parser", "cmd_status", "cmd_workers"]


def add_parser(sub: Any) -> None:
    status = sub.add_parser("status", help="trials by state, the best trial, running trials")
    status.add_argument("--study", required=True, help="study name")
    add_storage_flags(status)
    status.add_argument("--json", action="store_true", help="one JSON object")
    status.add_argument(
        "--watch",
        action="store_true",
        help="live: redrawn in place on a terminal (plain lines otherwise) until the study is "
        "finished or Ctrl-C (exit 0 either way)",
    )
    status.add_argument(
        "--interval",
        type=from_value_error(_refresh_seconds),
        metavar="S",
        help="seconds between refreshes with --watch (default: 2)",
    )
    status.set_defaults(handler=cmd_status)

    fleet = sub.add_parser(
        "workers", help="every worker of every machine, alive or lost, and what it runs"
    )
    fleet.add_argument("--study", help="only this study's workers")
    add_storage_flags(fleet)
    fleet.add_argument("--json", action="store_true", help="one JSON object")
    fleet.add_argument("--all", action="store_true", help="stopped workers too")
    fleet.set_defaults(handler=cmd_workers)


def cmd_status(args: argparse.Namespace) -> int:
    if args.watch and args.json:
        raise ConfigError("--watch and --json: choose one")
    if args.interval is not None and not args.watch:
        raise ConfigError("--interval is for --watch")
    storage = open_storage(storage_url(args))
    check_schema(storage)
    study = open_study(storage, args.study)
    if args.watch:
        return watch(storage, study, interval_s=args.interval or DEFAULT_INTERVAL_S)
    status = study_status(storage, study)
    print(json.dumps(status.to_dict()) if args.json else format_status(status))
    return EXIT_OK


def cmd_workers(args: argparse.Namespace) -> int:
    storage = open_storage(storage_url(args))
    check_schema(storage)
    study_id = open_study(storage, args.study).study_id if args.study else None
    listed = list_workers(storage, study_id=study_id, include_stopped=args.all)
    print(json.dumps(workers_json(listed)) if args.json else format_workers(listed))
    return EXIT_OK


def _refresh_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"not a number of seconds: {text!r}") from None
    if not 0.1 <= value <= 3600:  # also refuses nan and inf
        raise ValueError(f"must be between 0.1 and 3600 seconds, got {text}")
    return value
