"""`hpsearch estimate`: training memory per configuration and whether it fits, before launch;
`--measure`: the efficiency study of one configuration."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from search.commands.common import DEVICE_HELP, DEVICE_MEMORY_HELP, device_memory, positive_int
from search.estimate.measure import run_measure
from search.estimate.memory import estimate_json, estimate_memory, format_estimate, format_one
from search.estimate.picking import Configuration, configurations
from search.study.parse_config import load_config, params_from_overrides
from search.study.settings import ConfigError
from trainer import TaskImportError, resolve_task

__all__ = ["add_parser", "cmd_estimate"]


def add_parser(sub: Any) -> None:
    estimate = sub.add_parser(
        "estimate",
        help="training memory per configuration and whether it fits, before launch; "
        "--measure: the efficiency study of one configuration",
    )
    estimate.add_argument("config", help="study config (TOML)")
    estimate.add_argument("--device-memory", metavar="SIZE", help=DEVICE_MEMORY_HELP)
    estimate.add_argument("--device", help=DEVICE_HELP)
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
    """`hpsearch estimate`: returns the exit code; bad input raises ConfigError."""
    config = load_config(args.config)
    try:
        resolve_task(config.task.name)
    except TaskImportError as exc:
        raise ConfigError(f"task.name: {exc}") from None
    from trainer.memory import MemoryCheckError, MemoryTarget  # imports torch: only here

    params = params_from_overrides(config.space, args.overrides) if args.overrides else None
    if args.measure:
        if args.device_memory is not None:
            raise ConfigError("--measure trains for real on --device: --device-memory is not used")
        return run_measure(args, config, params or params_from_overrides(config.space, []))
    limit = device_memory(args.device_memory)  # else $HPSEARCH_DEVICE_MEMORY
    try:
        if args.device is None and limit is not None and not _cuda_available():
            target = MemoryTarget.for_gpu(limit, config.train.precision)
        else:
            target = MemoryTarget.for_device(args.device, config.train.precision, limit)
    except ValueError as exc:
        raise ConfigError(f"--device: {exc}") from None
    if args.samples < 0:
        raise ConfigError(f"--samples: must be >= 0, got {args.samples}")
    rows = (
        [Configuration("given", params)]
        if params is not None
        else configurations(config.space, samples=args.samples, seed=config.study.seed)
    )
    try:
        fits = estimate_memory(config, target, rows)
    except MemoryCheckError as exc:
        print(f"hpsearch: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(estimate_json(args.config, config, target, fits)))
    elif params is not None:
        print(format_one(args.config, target, *fits[0], config))
    else:
        print(format_estimate(args.config, config, target, fits))
    return 0


def _cuda_available() -> bool:
    import torch  # only when no GPU was named: `hpsearch --help` never loads torch

    return torch.cuda.is_available()
