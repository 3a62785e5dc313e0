"""Checks a worker passes before it registers or claims anything.

A worker that cannot train must not touch the study: with a mistyped ``--device cuda:3`` on a
machine without that GPU, or where the study's task module cannot be imported, a worker used to
claim every trial and fail it, burning the whole fleet's study in seconds. Here such a worker
stops with one line and exit code 2 before its first claim.

What only shows later (the device lost mid-study, the task's module gone) is a fault of the
machine, not of the trial: the worker hands the trial back untouched and stops (exit 1); see
`search.worker.loop`.
"""

from __future__ import annotations

import sys

from search.study.settings import ConfigError, StudyConfig
from trainer import TaskImportError, resolve_task

__all__ = ["check_device", "check_task"]


def check_task(config: StudyConfig) -> str:
    """The study's task factory imports here (the code every trial will run), or ConfigError.

    Returns where it comes from, for the worker's first log line: whoever can write the study
    database chooses the code every worker imports and runs (README, "Security")."""
    try:
        factory = resolve_task(config.task.name)
    except TaskImportError as exc:
        raise ConfigError(f"task.name: {exc}") from None
    module = sys.modules.get(getattr(factory, "__module__", ""), None)
    return f"{factory.__qualname__} from {getattr(module, '__file__', None) or '(built in)'}"


def check_device(device: str) -> str:
    """`device` exists on this machine and initializes (CUDA included), or ConfigError.

    Returns the device's name ("cpu" or the GPU's).
    """
    # torch loads here: a worker trains, so it pays for it now rather than in its first trial.
    from trainer.device import device_name, resolve_device  # imports torch: when checking

    try:
        where = resolve_device(device)
        return device_name(where)
    except ValueError as exc:
        raise ConfigError(f"--device: {exc}") from None
    except RuntimeError as exc:  # CUDA present but unusable (driver mismatch, busy device)
        line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ConfigError(f"--device {device}: cannot initialize it ({line})") from None
