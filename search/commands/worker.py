"""`hpsearch worker`: join a study and pull trials until it is done (`--gpus all`: one child
process per visible GPU)."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from search.commands.common import (
    DEVICE_HELP,
    PER_TRIAL_HELP,
    add_storage_flags,
    add_worker_flags,
    positive_int,
    storage_url,
    worker_options,
)
from search.db.migrate import check_schema
from search.db.storage import open_storage
from search.monitor.progress import StudyProgress
from search.study.studies import open_study
from search.worker.launcher import (
    check_devices,
    default_device,
    local_devices,
    run_worker_processes,
)
from search.worker.preflight import check_task
from search.worker.start import run_worker

__all__ = ["add_parser", "cmd_worker"]

logger = logging.getLogger("hpsearch")


def add_parser(sub: Any) -> None:
    worker = sub.add_parser("worker", help="join a study and pull trials until it is done")
    worker.add_argument("--study", required=True, help="study name")
    add_storage_flags(worker)
    worker.add_argument("--device", help=DEVICE_HELP)
    worker.add_argument("--gpus", choices=["all"], help="all: one worker process per visible GPU")
    add_worker_flags(worker)
    worker.add_argument("--gpus-per-trial", type=positive_int, metavar="K", help=PER_TRIAL_HELP)
    worker.set_defaults(handler=cmd_worker)


def cmd_worker(args: argparse.Namespace) -> int:
    options = worker_options(args)  # bad input is refused before anything is touched
    url = storage_url(args)
    storage = open_storage(url)
    check_schema(storage)
    study = open_study(storage, args.study)
    devices = (
        local_devices(None, gpus_only=True, per_trial=options.gpus_per_trial)
        if args.gpus == "all"
        else [args.device or default_device()]
    )
    # Nothing is registered or claimed before this machine is known to be able to train.
    task = check_task(study.config)
    for device in devices:
        check_devices(device, options.gpus_per_trial)
    logger.info("task %r: %s", study.config.task.name, task)
    if args.gpus == "all":  # even with one GPU: its child is restarted after a CUDA error
        progress = StudyProgress(url, study.name) if sys.stderr.isatty() else None
        return run_worker_processes(
            url, study.name, devices, options.argv(), restart_failed=True, progress=progress
        )
    return run_worker(storage, study.name, devices[0], options)
