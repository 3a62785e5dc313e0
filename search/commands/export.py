"""`hpsearch export --study NAME --to mlflow|wandb`: write a study's trials into a tracker;
`--to csv FILE`: one CSV row per trial, for a notebook (`search.commands.trials.write_csv`).

The tracker's settings are the study's own `[tracking]` (stored with the study), or flags;
flags win. Credentials come only from the tracker's environment (MLFLOW_TRACKING_TOKEN,
MLFLOW_TRACKING_USERNAME/PASSWORD, WANDB_API_KEY, ~/.netrc).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from search.commands.common import add_storage_flags, storage_url
from search.db.migrate import check_schema
from search.db.storage import open_storage
from search.errors import EXIT_OK
from search.study.parse_config import parse_tracking
from search.study.settings import ConfigError
from search.study.studies import open_study

__all__ = ["add_parser", "cmd_export"]


def add_parser(sub: Any) -> None:
    """The `export` subcommand, on the CLI's subparsers."""
    export = sub.add_parser(
        "export",
        help="write a study's trials into MLflow or W&B (idempotent), or a CSV file",
        description="Write every started trial of a study into an experiment tracker, one run "
        "per trial (params, the metric at every epoch, state, provenance), in the same runs "
        "the workers write to. Exporting again adds nothing. --to csv FILE: one row per trial "
        "(number, state, value, epochs, rung, worker, times, params_<name>), for pandas.",
    )
    export.add_argument("--study", required=True, help="study name")
    export.add_argument(
        "--to", required=True, choices=("mlflow", "wandb", "csv"), help="the tracker, or csv"
    )
    export.add_argument("file", nargs="?", metavar="FILE", help="with --to csv: the CSV file")
    add_storage_flags(export)
    export.add_argument("--uri", help="MLflow tracking URI (default: the study's [tracking])")
    export.add_argument("--experiment", help="MLflow experiment (default: the study's)")
    export.add_argument("--project", help="W&B project (default: the study's [tracking])")
    export.add_argument("--entity", help="W&B entity")
    export.add_argument("--mode", choices=("online", "offline"), help="W&B mode")
    export.set_defaults(handler=cmd_export)


def cmd_export(args: argparse.Namespace) -> int:
    from search.tracking.export import export_study
    from search.tracking.trackers import open_trackers

    if args.to == "csv":
        return _export_csv(args)
    if args.file is not None:
        raise ConfigError(f"{args.file}: a FILE is for --to csv, not --to {args.to}")
    flags = {
        "mlflow": {"uri": args.uri, "experiment": args.experiment},
        "wandb": {"project": args.project, "entity": args.entity, "mode": args.mode},
    }
    for other, given in flags.items():
        if other != args.to and any(v is not None for v in given.values()):
            names = ", ".join(f"--{k}" for k, v in given.items() if v is not None)
            raise ConfigError(f"{names}: for --to {other}, not --to {args.to}")
    storage = open_storage(storage_url(args))
    try:
        check_schema(storage)
        study = open_study(storage, args.study)
        stored = getattr(study.config.tracking, args.to)
        table = {k: v for k, v in (asdict(stored) if stored else {}).items() if v is not None}
        table.update({k: v for k, v in flags[args.to].items() if v is not None})
        if not table:
            raise ConfigError(
                f"study {study.name!r} has no [tracking] {args.to} settings: give them with "
                + ("--uri (and --experiment)" if args.to == "mlflow" else "--project")
            )
        settings = parse_tracking({args.to: table})
        (tracker,) = open_trackers(study, settings, only=args.to)
        counts = export_study(storage, study, tracker)
    finally:
        storage.close()
    print(
        f"study {study.name!r}: {counts.finished} finished and {counts.running} running "
        f"trial(s) in {tracker.name} {tracker.where}"
    )
    return EXIT_OK


def _export_csv(args: argparse.Namespace) -> int:
    from search.commands.trials import write_csv
    from search.db.trial_table import read_trials

    given = [
        f"--{k}" for k in ("uri", "experiment", "project", "entity", "mode") if getattr(args, k)
    ]
    if given:
        raise ConfigError(f"{', '.join(given)}: for --to mlflow or wandb, not --to csv")
    if not args.file:
        raise ConfigError("--to csv: give the CSV file to write, e.g. --to csv trials.csv")
    target = Path(args.file)
    if target.is_dir() or not target.parent.is_dir():
        raise ConfigError(f"{args.file}: not a file in an existing directory")
    storage = open_storage(storage_url(args))
    try:
        check_schema(storage)
        study = open_study(storage, args.study)
        rows = read_trials(storage, study.study_id)
    finally:
        storage.close()
    names = [p.name for p in study.config.space]
    names += sorted({k for r in rows for k in r.params} - set(names))
    # Written beside the target and renamed into place: a reader never sees half a table.
    with tempfile.NamedTemporaryFile(
        "w", dir=target.parent, prefix=f".{target.name}.", newline="", delete=False
    ) as out:
        write_csv(rows, out, names)
    os.replace(out.name, target)
    print(f"study {study.name!r}: {len(rows)} trial(s) written to {target}")
    return EXIT_OK
