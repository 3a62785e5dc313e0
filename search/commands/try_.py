"""`hpsearch try`: train one configuration by hand; nothing is written to a study."""

from __future__ import annotations

import argparse
from typing import Any

from search.commands.common import DEVICE_HELP, add_storage_flags
from search.worker.trial_by_hand import try_config

__all__ = ["add_parser", "cmd_try"]


def add_parser(sub: Any) -> None:
    try_ = sub.add_parser(
        "try",
        help="train one configuration by hand (nothing is written to a study)",
        description="Train one configuration of a study config's task and print its metric per "
        "epoch. Params not set take the middle of their range. Exit codes: 0 completed, 1 "
        "diverged or failed, 2 bad input, 130 interrupted.",
    )
    try_.add_argument("config", metavar="CONFIG", help="study config (TOML)")
    try_.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a hyperparameter from the config's [space] (repeatable)",
    )
    again = try_.add_mutually_exclusive_group()
    again.add_argument(
        "--trial",
        metavar="STUDY:N",
        help="the params of trial N of a study (then --set on top), e.g. --trial digits:12",
    )
    again.add_argument("--best", metavar="STUDY", help="the params of a study's best trial")
    add_storage_flags(try_)
    try_.add_argument("--epochs", type=int, help="epochs to train (default: task.epochs)")
    try_.add_argument("--device", help=DEVICE_HELP)
    try_.add_argument("--seed", type=int, help="training seed (default: study.seed)")
    try_.add_argument(
        "--checkpoint-dir",
        metavar="DIR",
        help="keep a checkpoint here and resume from it (same config and params)",
    )
    try_.set_defaults(handler=cmd_try)


def cmd_try(args: argparse.Namespace) -> int:
    if args.trial or args.best:
        from search.commands.again import study_trial_overrides

        # A study's trial again: its params as --set flags, the user's own --set on top.
        args.overrides = [*study_trial_overrides(args), *args.overrides]
    return try_config(args)
