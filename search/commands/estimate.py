"""`hpsearch estimate`: training memory per configuration and whether it fits, before launch;
`--measure`: the efficiency study of one configuration."""

from __future__ import annotations

import argparse
from typing import Any

from search.commands.common import DEVICE_MEMORY_HELP, positive_int
from search.estimate.estimate import run_estimate

__all__ = ["add_parser", "cmd_estimate"]


def add_parser(sub: Any) -> None:
    estimate = sub.add_parser(
        "estimate",
        help="training memory per configuration and whether it fits, before launch; "
        "--measure: the efficiency study of one configuration",
    )
    estimate.add_argument("config", help="study config (TOML)")
    estimate.add_argument("--device-memory", metavar="SIZE", help=DEVICE_MEMORY_HELP)
    estimate.add_argument("--device", help="cpu or cuda:N (default: cuda if available, else cpu)")
    estimate.add_argument("--json", action="store_true", help="one JSON object")
    estimate.add_argument(
        "--samples",
        type=int,
        default=3,
        help="random configurations besides the extremes of each parameter (default: 3)",
    )
    estimate.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="one configuration: a parameter of [space] (repeatable; others take the middle)",
    )
    estimate.add_argument(
        "--measure",
        action="store_true",
        help="train a few real steps of one configuration under fp32, bf16, accumulation and "
        "checkpointing: peak memory and time per step against fp32",
    )
    estimate.add_argument(
        "--steps",
        type=positive_int,
        default=10,
        help="timed optimizer steps per --measure row (default: 10)",
    )
    estimate.set_defaults(handler=cmd_estimate)


def cmd_estimate(args: argparse.Namespace) -> int:
    return run_estimate(args)
