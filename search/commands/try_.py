"""`hpsearch try CONFIG [--set lr=0.003 --set width=32] [--epochs N]`: train one trial by hand.

The way to debug one configuration of a study without a study: nothing is written to any
storage. Params not given take the middle of their range in the config's ``[space]``; ``--set``
values are checked against it. Prints one line per epoch (with a live progress bar within the
epoch on a terminal)::

    epoch 3/9  val_accuracy 0.9611  (1.2 s)

Exit codes: 0 completed, 1 diverged or failed, 2 bad input (one line on stderr), 130 interrupted
(Ctrl-C, or SIGTERM: with --checkpoint-dir, run the same command to resume).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import replace
from typing import Any

from search.commands.common import DEVICE_HELP, add_storage_flags
from search.study.parse_config import load_config, params_from_overrides
from search.study.settings import ConfigError
from search.terminal import format_value
from trainer import DirectoryCheckpointStore, TaskImportError, resolve_task

__all__ = ["add_parser", "cmd_try", "try_config"]


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
    return try_config(
        args.config,
        args.overrides,
        epochs=args.epochs,
        device=args.device,
        seed=args.seed,
        checkpoint_dir=args.checkpoint_dir,
    )


def try_config(
    config_path: str,
    overrides: list[str],
    *,
    epochs: int | None = None,
    device: str | None = None,
    seed: int | None = None,
    checkpoint_dir: str | None = None,
) -> int:
    """Train the configuration of `config_path` given by `overrides` (NAME=VALUE; the others
    take the middle of their range); returns the exit code. Bad input raises ConfigError."""
    # Everything the user typed is checked before torch is imported, so mistakes answer fast.
    study = load_config(config_path)
    params = params_from_overrides(study.space, overrides)
    if epochs is not None and epochs < 1:
        raise ConfigError(f"--epochs: must be >= 1, got {epochs}")
    config = replace(
        study.train,
        epochs=study.train.epochs if epochs is None else epochs,
        seed=study.train.seed if seed is None else seed,
    )
    try:
        factory = resolve_task(study.task.name)
    except TaskImportError as exc:
        raise ConfigError(f"task.name: {exc}") from None

    # torch loads here, only once the input is known to be good.
    from trainer.device import resolve_device  # imports torch: only when a trial runs
    from trainer.loop import train

    try:
        resolve_device(device)
    except ValueError as exc:
        raise ConfigError(f"--device: {exc}") from None

    # The trainer's decisions (precision, resume, adaptations) go to stderr, one line each.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("trainer: %(message)s"))
    logger = logging.getLogger("trainer")
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False

    shown = "  ".join(f"{name}={format_value(value)}" for name, value in params.items())
    print(f"{study.task.name}: {shown}", flush=True)
    display = _Display(config.epochs, study.study.metric)
    store = DirectoryCheckpointStore(checkpoint_dir) if checkpoint_dir else None
    try:
        result = train(
            factory,
            params,
            config,
            report=display.report,
            checkpoints=store,
            device=device,
            progress=display.progress,
        )
    finally:
        display.close()
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate

    summary = (
        f"{result.status}: {study.study.metric} {format_value(result.metric)} after "
        f"{result.epochs_run} epoch(s) ({result.precision} on {result.device_name}, "
        f"{result.wall_seconds:.1f} s)"
    )
    if result.status == "completed":
        print(summary)
        return 0
    if result.status == "preempted":
        where = "; resume with the same command" if store is not None else ""
        print(f"{summary}{where}", file=sys.stderr)
        return 130
    print(f"{summary}: {result.reason}", file=sys.stderr)
    if result.traceback:
        print(result.traceback, file=sys.stderr, end="")
    return 1


class _Display:
    """One line per epoch; on a terminal, a progress bar within the epoch as well."""

    def __init__(self, epochs: int, metric: str) -> None:
        self.epochs, self.metric = epochs, metric
        self.interactive = sys.stdout.isatty()
        self.bar: Any = None
        self.epoch_started = time.perf_counter()

    def progress(self, epoch: int, step: int, steps: int, loss: float) -> None:
        if not self.interactive:
            return
        if self.bar is None:
            from tqdm import tqdm  # only for a terminal

            self.bar = tqdm(
                total=steps,
                desc=f"epoch {epoch}/{self.epochs}",
                leave=False,
                file=sys.stdout,
                dynamic_ncols=True,
            )
            self.bar.update(step - 1)  # resumed mid-epoch
        self.bar.set_postfix_str(f"loss {loss:.4f}", refresh=False)
        self.bar.update(1)

    def report(self, epoch: int, value: float) -> bool:
        self.close()
        seconds = time.perf_counter() - self.epoch_started
        print(
            f"epoch {epoch}/{self.epochs}  {self.metric} {value:.4f}  ({seconds:.1f} s)", flush=True
        )
        self.epoch_started = time.perf_counter()
        return False  # a run by hand is never pruned

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
