"""`hpsearch run` (create the study, run local workers until it is done) and `hpsearch create`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from search.commands.common import (
    PER_TRIAL_HELP,
    add_storage_flags,
    add_worker_flags,
    positive_int,
    storage_url,
    worker_options,
)
from search.db.storage import Storage, open_storage
from search.errors import EXIT_OK
from search.monitor.progress import StudyProgress
from search.monitor.run_summary import run_summary
from search.monitor.status import study_status
from search.sampling.setup import set_up_study
from search.study.parse_config import load_config
from search.study.settings import StudyConfig
from search.study.studies import StudyRef, open_study
from search.worker.launcher import (
    check_devices,
    local_devices,
    run_worker_processes,
)
from search.worker.preflight import check_task
from search.worker.start import run_worker

__all__ = ["add_parser", "cmd_create", "cmd_run"]


def add_parser(sub: Any) -> None:
    run = sub.add_parser("run", help="create the study and run local workers until it is done")
    run.add_argument("config", help="study config (TOML)")
    run.add_argument(
        "--workers", type=positive_int, help="local workers (default: one per GPU, else 1)"
    )
    run.add_argument(
        "--device",
        help="cpu, cuda or cuda:N for every local worker (default: one worker per visible GPU, "
        "else cpu)",
    )
    add_storage_flags(run)
    add_worker_flags(run)
    run.add_argument("--gpus-per-trial", type=positive_int, metavar="K", help=PER_TRIAL_HELP)
    run.set_defaults(handler=cmd_run)

    create = sub.add_parser("create", help="create the study (idempotent)")
    create.add_argument("config", help="study config (TOML)")
    add_storage_flags(create)
    create.set_defaults(handler=cmd_create)


def cmd_create(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    check_task(config)
    storage = open_storage(storage_url(args), create=True)
    study, created = _create(storage, config, args.argv)
    verb = "created" if created else "already exists, same config:"
    print(f"study {study.name!r} {verb} in {storage.safe_url}")
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    check_task(config)
    options = worker_options(args)
    if args.device:
        devices = [args.device] * (args.workers or 1)
    else:
        devices = local_devices(args.workers, per_trial=options.gpus_per_trial)
    for device in sorted(set(devices)):
        check_devices(device, options.gpus_per_trial)
    url = storage_url(args)
    storage = open_storage(url, create=True)
    study, _ = _create(storage, config, args.argv)
    # The next commands need --storage only if this one had it ($HPSEARCH_STORAGE holds for them).
    default_storage = args.storage is None and getattr(args, "schema", None) is None
    before = study_status(storage, study)
    if before.done:
        summary = run_summary(
            before, storage, options.artifacts, default_storage=default_storage, already=True
        )
        print(summary)
        return EXIT_OK
    if len(devices) == 1:
        code = run_worker(storage, study.name, devices[0], options)
    else:
        on_gpus = all(d.startswith("cuda") for d in devices)
        progress = StudyProgress(url, study.name) if sys.stderr.isatty() else None
        code = run_worker_processes(
            url, study.name, devices, options.argv(), restart_failed=on_gpus, progress=progress
        )
    status = study_status(storage, open_study(storage, study.name))
    print(run_summary(status, storage, options.artifacts, default_storage=default_storage))
    return code


def _create(
    storage: Storage, config: StudyConfig, argv: Sequence[str] | None = None
) -> tuple[StudyRef, bool]:
    return set_up_study(storage, config, sys.argv[1:] if argv is None else argv)
