"""`hpsearch extend --study NAME [--budget-epochs N] [--budget-hours H] [--n-trials N]`: more
budget for a study, running or over (the same as raising them in its config and running
`create`/`run` again: `search.study.extend`)."""

from __future__ import annotations

import argparse
from typing import Any

from search.commands.common import add_storage_flags, positive_int, storage_url
from search.db.migrate import check_schema
from search.db.reopen import spent
from search.db.storage import open_storage
from search.errors import EXIT_OK
from search.study.extend import extend_study
from search.study.settings import ConfigError
from search.study.studies import open_study

__all__ = ["add_parser", "cmd_extend"]


def add_parser(sub: Any) -> None:
    extend = sub.add_parser(
        "extend",
        help="more budget for a study, running or over: it continues where it stopped",
    )
    extend.add_argument("--study", required=True, help="study name")
    add_storage_flags(extend)
    extend.add_argument("--budget-epochs", type=positive_int, metavar="N", help="new epoch budget")
    extend.add_argument("--budget-hours", type=_hours, metavar="H", help="new hour budget")
    extend.add_argument("--n-trials", type=positive_int, metavar="N", help="new trial count")
    extend.set_defaults(handler=cmd_extend)


def _hours(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of hours: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def cmd_extend(args: argparse.Namespace) -> int:
    wanted = {
        k: v
        for k, v in (
            ("budget_epochs", args.budget_epochs),
            ("budget_hours", args.budget_hours),
            ("n_trials", args.n_trials),
        )
        if v is not None
    }
    if not wanted:
        raise ConfigError(
            "give the new budget: --budget-epochs N, --budget-hours H or --n-trials N"
        )
    storage = open_storage(storage_url(args))
    try:
        check_schema(storage)
        study = open_study(storage, args.study)
        for key in wanted:
            if getattr(study.config.study, key) is None:
                flag = "--" + key.replace("_", "-")
                raise ConfigError(
                    f"{flag}: study {study.name!r} has no study.{key} to raise (a budget "
                    "cannot be added to a study that has none)"
                )
        same = {k: v for k, v in wanted.items() if getattr(study.config.study, k) == v}
        if len(same) == len(wanted):
            raise ConfigError(f"study {study.name!r} already has {_show(wanted)}")
        config = study.config.with_study(**wanted)
        extended = extend_study(storage, study, config, may_lower=True)
        assert extended is not None  # only budgets changed
        used = spent(storage, study.study_id)
    finally:
        storage.close()
    print(
        f"study {study.name!r}: {_show(wanted)} ({used.epochs} epochs and {used.trials} trials "
        f"spent); workers running now spend it too; to start more: "
        f"hpsearch worker --study {study.name}"
    )
    return EXIT_OK


def _show(values: dict[str, Any]) -> str:
    return ", ".join(f"{k} = {v:g}" for k, v in values.items())
