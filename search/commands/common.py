"""What several commands share: the parser class, the flags declared once, and the environment
defaults (``$HPSEARCH_STORAGE``, ``$HPSEARCH_SCHEMA``, ``$HPSEARCH_ARTIFACTS``,
``$HPSEARCH_GRACE_S``, ``$HPSEARCH_DEVICE_MEMORY``) read in one place."""

from __future__ import annotations

import argparse
import functools
import os
import re
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

from search.db.storage import resolve_url
from search.errors import EXIT_BAD_INPUT
from search.study.settings import ConfigError
from search.worker.artifacts import existing_directory
from search.worker.loop import DEFAULT_GRACE_S
from search.worker.start import WorkerOptions
from trainer.sizes import parse_size

__all__ = [
    "ARTIFACTS_HELP",
    "DEVICE_HELP",
    "DEVICE_MEMORY_HELP",
    "GRACE_HELP",
    "GRACE_RANGE_S",
    "KEEP_HELP",
    "PER_TRIAL_HELP",
    "Parser",
    "add_storage_flags",
    "add_worker_flags",
    "artifacts_dir",
    "device_memory",
    "from_value_error",
    "grace",
    "grace_seconds",
    "positive_int",
    "storage_url",
    "whole_number",
    "worker_options",
]

T = TypeVar("T")

STORAGE_HELP = "study database (default: $HPSEARCH_STORAGE, else sqlite:///hpsearch.db)"
SCHEMA_HELP = (
    "PostgreSQL schema for Optuna's tables and hpsearch's, beside other tools' "
    "(default: $HPSEARCH_SCHEMA, else the URL's ?options=-csearch_path=NAME, else public "
    "and hpsearch)"
)
ARTIFACTS_HELP = (
    "directory for checkpoints that every worker can reach, e.g. a shared volume "
    "(default: $HPSEARCH_ARTIFACTS, else the PostgreSQL database itself, or "
    "DB.artifacts/ beside a SQLite file)"
)
KEEP_HELP = "keep each trial's last checkpoint when it finishes (default: delete it)"
DEVICE_HELP = "cpu, cuda or cuda:N (default: cuda:0 when a GPU is visible, else cpu)"

DEVICE_MEMORY_HELP = (
    "memory of the device a trial trains on, e.g. 80GB (10^9 bytes) or 24GiB (2^30) "
    "(default: $HPSEARCH_DEVICE_MEMORY, else a GPU's free memory; a CPU has no limit)"
)
PER_TRIAL_HELP = (
    "train each trial data-parallel (DDP) on K GPUs, K processes (on a CPU: K processes, "
    "gloo); with --gpus all the GPUs are grouped K per worker (default: 1)"
)
GRACE_HELP = (
    "seconds without a heartbeat after which a worker counts as dead and its trial resumes "
    "elsewhere (default: $HPSEARCH_GRACE_S, else 60)"
)
_NEGATIVE_VALUE = re.compile(r"^-\.?\d")
"""What a value that starts with a minus looks like to `Parser`: -2, -1GB, -.5."""
GRACE_RANGE_S = (1.0, 86400.0)
"""Grace periods hpsearch accepts: a worker heartbeats every grace/6 seconds, so below a
second it would spend its time heartbeating; above a day a dead worker's trial waits a day."""


class Parser(argparse.ArgumentParser):
    """Bad command lines are bad input like any other: one line, exit code 2.

    A value that starts with a minus and a digit (`--device-memory -1GB`) is read as the
    flag's value, so the flag's own check names what is wrong with it: argparse would take
    `-1GB` for an unknown flag and say the flag "expected one argument". (No flag of hpsearch
    looks like a negative number.)"""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _NEGATIVE_VALUE

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"hpsearch: error: {message} (see {self.prog} --help)\n")


def add_storage_flags(parser: argparse.ArgumentParser) -> None:
    """--storage and --schema: which study database (see `storage_url`)."""
    parser.add_argument("--storage", help=STORAGE_HELP)
    parser.add_argument("--schema", help=SCHEMA_HELP)


def add_worker_flags(parser: argparse.ArgumentParser, *, keep: bool = True) -> None:
    """The flags of the workers a command runs (see `worker_options`); `keep`: with
    --keep-checkpoints."""
    parser.add_argument("--artifacts", help=ARTIFACTS_HELP)
    parser.add_argument("--grace-s", type=grace_seconds, help=GRACE_HELP)
    if keep:
        parser.add_argument("--keep-checkpoints", action="store_true", help=KEEP_HELP)
    else:
        parser.set_defaults(keep_checkpoints=False)
    parser.add_argument("--device-memory", metavar="SIZE", help=DEVICE_MEMORY_HELP)


def storage_url(args: argparse.Namespace) -> str:
    """--storage/--schema, else $HPSEARCH_STORAGE/$HPSEARCH_SCHEMA, else a local SQLite file."""
    return resolve_url(args.storage, getattr(args, "schema", None))


def artifacts_dir(cli_value: str | None) -> str | None:
    """--artifacts, else $HPSEARCH_ARTIFACTS; None: the database's own store."""
    return cli_value or os.environ.get("HPSEARCH_ARTIFACTS") or None


def worker_options(args: argparse.Namespace) -> WorkerOptions:
    """The options of `add_worker_flags` (and --gpus-per-trial), environment defaults applied;
    ConfigError (exit 2) on a bad value, before anything is touched."""
    artifacts = artifacts_dir(args.artifacts)
    return WorkerOptions(
        artifacts=existing_directory(artifacts) if artifacts else None,
        grace_s=grace(args.grace_s),
        keep_checkpoints=args.keep_checkpoints,
        device_memory=device_memory(args.device_memory),
        gpus_per_trial=getattr(args, "gpus_per_trial", None) or 1,
    )


def grace(cli_value: float | None) -> float:
    """--grace-s, else $HPSEARCH_GRACE_S, else the default."""
    if cli_value is not None:
        return cli_value
    env = os.environ.get("HPSEARCH_GRACE_S")
    if not env:
        return DEFAULT_GRACE_S
    try:
        return grace_seconds(env)
    except argparse.ArgumentTypeError as exc:
        raise ConfigError(f"HPSEARCH_GRACE_S={env!r}: {exc}") from None


def grace_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    low, high = GRACE_RANGE_S
    if not low <= value <= high:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(
            f"must be between {low:g} and {high:g} seconds, got {text}"
        )
    return value


def device_memory(cli_value: str | None) -> int | None:
    """--device-memory, else $HPSEARCH_DEVICE_MEMORY, in bytes; None if neither is set."""
    name, text = "--device-memory", cli_value
    if text is None:
        name, text = "HPSEARCH_DEVICE_MEMORY", os.environ.get("HPSEARCH_DEVICE_MEMORY") or None
    if text is None:
        return None
    try:
        return parse_size(text)
    except ValueError as exc:
        raise ConfigError(f"{name}: {exc}") from None


def from_value_error(parse: Callable[[str], T]) -> Callable[[str], T]:
    """An argparse type from a parser that raises ValueError with the message to show."""

    @functools.wraps(parse)
    def parse_argument(text: str) -> T:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse_argument


def positive_int(text: str) -> int:
    return _int_at_least(text, 1)


def whole_number(text: str) -> int:
    return _int_at_least(text, 0)


def _int_at_least(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be >= {least}, got {value}")
    return value
