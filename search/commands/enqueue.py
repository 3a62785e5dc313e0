"""`hpsearch enqueue --study NAME --set k=v ...`: a known configuration to run next, exactly once,
checked against the study's space (a warm start: last month's best, a paper's defaults)."""

from __future__ import annotations

import argparse
from typing import Any

from search.commands.common import add_storage_flags, storage_url
from search.db.migrate import check_schema
from search.db.storage import open_storage
from search.errors import EXIT_OK
from search.study.enqueue import EnqueueError, parse_enqueue_flags
from search.study.settings import ConfigError
from search.study.studies import open_study
from search.terminal import format_value

__all__ = ["add_parser", "cmd_enqueue"]


def add_parser(sub: Any) -> None:
    enqueue = sub.add_parser(
        "enqueue",
        help="a known configuration to run next, exactly once (checked against the space)",
    )
    enqueue.add_argument("--study", required=True, help="study name")
    add_storage_flags(enqueue)
    enqueue.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a hyperparameter of the study's [space] (repeatable; those not set are sampled)",
    )
    enqueue.set_defaults(handler=cmd_enqueue)


def cmd_enqueue(args: argparse.Namespace) -> int:
    from search.sampling.enqueue import enqueue_configuration

    if not args.overrides:
        raise ConfigError("give the configuration with --set NAME=VALUE (repeatable)")
    storage = open_storage(storage_url(args))
    try:
        check_schema(storage)
        study = open_study(storage, args.study)
        try:
            params = parse_enqueue_flags(study.config.space, args.overrides)
        except EnqueueError as exc:
            raise ConfigError(str(exc)) from None
        number = enqueue_configuration(storage, study, params)
    finally:
        storage.close()
    shown = "  ".join(f"{k}={format_value(v)}" for k, v in params.items())
    print(f"study {study.name!r}: trial {number} will run {shown} (next in the queue)")
    return EXIT_OK
