"""The `hpsearch` command line.

Exit codes: 0 done; 1 runtime failure; 2 bad input (config, storage URL, unreachable database,
unknown study); 130 interrupted.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

from search.db.migrate import check_schema, upgrade
from search.db.roles import VIEWER_ROLE, WORKER_ROLE, RoleNames, grant_roles, refused_write
from search.db.storage import Storage, StorageError, open_storage, resolve_url, retry
from search.errors import RuntimeFailure
from search.estimate.estimate import run_estimate
from search.monitor.dashboard import host_name, port_number
from search.monitor.dashboard import serve as serve_dashboard
from search.monitor.status import finished_of, format_best, format_status, study_status
from search.monitor.workers import delete_study, format_workers, list_workers, workers_json
from search.study.config import ConfigError, StudyConfig, load_config
from search.study.setup import set_up_study
from search.study.studies import StudyRef, open_study
from search.worker.artifacts import artifact_store_for, existing_directory
from search.worker.local_gpus import CHILD_RESTARTS, ChildPlan, child_plans, restart_delay
from search.worker.loop import DEFAULT_GRACE_S, Worker
from search.worker.preflight import check_device, check_task
from search.worker.training import run_training
from search.worker.trial_by_hand import try_config
from search.worker.trial_group import gpu_groups, group_label, run_trial_group, trial_devices

__all__ = ["entry_point", "main"]

logger = logging.getLogger("hpsearch")

T = TypeVar("T")

EXIT_OK, EXIT_FAILURE, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


class _Parser(argparse.ArgumentParser):
    """Bad command lines are bad input like any other: one line, exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"hpsearch: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="hpsearch",
        description="Hyperparameter search for PyTorch training on one or many GPU machines.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    storage_help = "study database (default: $HPSEARCH_STORAGE, else sqlite:///hpsearch.db)"
    schema_help = (
        "PostgreSQL schema for Optuna's tables and hpsearch's, beside other tools' "
        "(default: $HPSEARCH_SCHEMA, else the URL's ?options=-csearch_path=NAME, else public "
        "and hpsearch)"
    )
    artifacts_help = (
        "directory for checkpoints that every worker can reach, e.g. a shared volume "
        "(default: $HPSEARCH_ARTIFACTS, else the PostgreSQL database itself, or "
        "DB.artifacts/ beside a SQLite file)"
    )
    keep_help = "keep each trial's last checkpoint when it finishes (default: delete it)"

    run = sub.add_parser("run", help="create the study and run local workers until it is done")
    run.add_argument("config", help="study config (TOML)")
    run.add_argument(
        "--workers", type=_positive_int, help="local workers (default: one per GPU, else 1)"
    )
    run.add_argument("--storage", help=storage_help)
    run.add_argument("--schema", help=schema_help)
    run.add_argument("--artifacts", help=artifacts_help)
    run.add_argument("--grace-s", type=_grace_seconds, help=_GRACE_HELP)
    run.add_argument("--keep-checkpoints", action="store_true", help=keep_help)
    run.add_argument("--device-memory", metavar="SIZE", help=_DEVICE_MEMORY_HELP)
    run.add_argument("--gpus-per-trial", type=_positive_int, metavar="K", help=_PER_TRIAL_HELP)

    create = sub.add_parser("create", help="create the study (idempotent)")
    create.add_argument("config", help="study config (TOML)")
    create.add_argument("--storage", help=storage_help)
    create.add_argument("--schema", help=schema_help)

    worker = sub.add_parser("worker", help="join a study and pull trials until it is done")
    worker.add_argument("--study", required=True, help="study name")
    worker.add_argument("--storage", help=storage_help)
    worker.add_argument("--schema", help=schema_help)
    worker.add_argument("--artifacts", help=artifacts_help)
    worker.add_argument("--device", help="cuda:N or cpu (default: cuda if available, else cpu)")
    worker.add_argument("--gpus", choices=["all"], help="all: one worker process per visible GPU")
    worker.add_argument("--grace-s", type=_grace_seconds, help=_GRACE_HELP)
    worker.add_argument("--keep-checkpoints", action="store_true", help=keep_help)
    worker.add_argument("--device-memory", metavar="SIZE", help=_DEVICE_MEMORY_HELP)
    worker.add_argument("--gpus-per-trial", type=_positive_int, metavar="K", help=_PER_TRIAL_HELP)

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
    try_.add_argument("--epochs", type=int, help="epochs to train (default: task.epochs)")
    try_.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda if available)")
    try_.add_argument("--seed", type=int, help="training seed (default: study.seed)")
    try_.add_argument(
        "--checkpoint-dir",
        metavar="DIR",
        help="keep a checkpoint here and resume from it (same config and params)",
    )

    status = sub.add_parser("status", help="trials by state, the best trial, running trials")
    status.add_argument("--study", required=True, help="study name")
    status.add_argument("--storage", help=storage_help)
    status.add_argument("--schema", help=schema_help)
    status.add_argument("--json", action="store_true", help="one JSON object")
    status.add_argument(
        "--watch",
        action="store_true",
        help="live: redrawn in place on a terminal (plain lines otherwise) until the study is "
        "finished or Ctrl-C (exit 0 either way)",
    )
    status.add_argument(
        "--interval",
        type=_from_value_error(_refresh_seconds),
        metavar="S",
        help="seconds between refreshes with --watch (default: 2)",
    )

    dashboard = sub.add_parser(
        "dashboard",
        help="optuna-dashboard on the storage, with the trials' checkpoints and reports",
        description="Serve optuna-dashboard on the study database, with the artifact store "
        "the workers write (kept checkpoints and attached reports open from the page). It has "
        "no authentication and can change and delete studies: it listens on 127.0.0.1 unless "
        "--host says otherwise (and then warns); with a read-only database role it only shows. "
        "Ctrl-C (or SIGTERM) stops it with exit code 0. Exit codes: 0 stopped, 2 bad input "
        "(port, host, storage, unreachable database, missing --artifacts directory).",
    )
    dashboard.add_argument("--storage", help=storage_help)
    dashboard.add_argument("--schema", help=schema_help)
    dashboard.add_argument(
        "--host",
        default="127.0.0.1",
        type=_from_value_error(host_name),
        help="address to listen on (default: 127.0.0.1, this machine only; any other warns "
        "that the dashboard has no authentication)",
    )
    dashboard.add_argument(
        "--port",
        default=8080,
        type=_from_value_error(port_number),
        help="port to listen on (default: 8080; 0: any free port, printed)",
    )
    dashboard.add_argument(
        "--artifacts",
        help="the directory workers were given with --artifacts, where checkpoints and reports "
        "are (default: $HPSEARCH_ARTIFACTS, else the PostgreSQL database itself, or "
        "DB.artifacts/ beside a SQLite file)",
    )

    migrate = sub.add_parser(
        "migrate",
        help="bring Optuna's and hpsearch's tables up to date (the one command that runs DDL)",
    )
    migrate.add_argument("--storage", help=storage_help)
    migrate.add_argument("--schema", help=schema_help)
    migrate.add_argument(
        "--create-roles",
        action="store_true",
        help="also create the worker role (reads and writes rows, no DDL) and the read-only "
        "viewer role; LOGIN with the password in $HPSEARCH_WORKER_PASSWORD / "
        "$HPSEARCH_VIEWER_PASSWORD (or *_FILE), else NOLOGIN",
    )
    migrate.add_argument("--worker-role", default=WORKER_ROLE, help=f"(default: {WORKER_ROLE})")
    migrate.add_argument("--viewer-role", default=VIEWER_ROLE, help=f"(default: {VIEWER_ROLE})")

    fleet = sub.add_parser(
        "workers", help="every worker of every machine, alive or lost, and what it runs"
    )
    fleet.add_argument("--study", help="only this study's workers")
    fleet.add_argument("--storage", help=storage_help)
    fleet.add_argument("--schema", help=schema_help)
    fleet.add_argument("--json", action="store_true", help="one JSON object")
    fleet.add_argument("--all", action="store_true", help="stopped workers too")

    delete = sub.add_parser(
        "delete", help="delete a study: its trials, workers, leases and checkpoints"
    )
    delete.add_argument("--study", required=True, help="study name")
    delete.add_argument("--storage", help=storage_help)
    delete.add_argument("--schema", help=schema_help)
    delete.add_argument(
        "--artifacts",
        help="the directory its workers kept checkpoints in, if any (default: "
        "$HPSEARCH_ARTIFACTS, else the database, or DB.artifacts/ beside a SQLite file)",
    )
    delete.add_argument("--force", action="store_true", help="even while live workers are on it")

    estimate = sub.add_parser(
        "estimate",
        help="training memory per configuration and whether it fits, before launch; "
        "--measure: the efficiency study of one configuration",
    )
    estimate.add_argument("config", help="study config (TOML)")
    estimate.add_argument("--device-memory", metavar="SIZE", help=_DEVICE_MEMORY_HELP)
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
        type=_positive_int,
        default=10,
        help="timed optimizer steps per --measure row (default: 10)",
    )
    _add_compare_parser(sub, storage_help, schema_help, artifacts_help)
    return parser


def _add_compare_parser(sub: Any, storage_help: str, schema_help: str, artifacts_help: str) -> None:
    compare = sub.add_parser(
        "compare",
        help="the same search under several strategies at one budget, K repeats each: a report",
        description="For every sampler x pruner, K repeats of the study at a budget of N trials, "
        "each an ordinary study named <name>-<sampler>[-<pruner>]-r<k>; then DIR/report.md, "
        "DIR/report.html, DIR/summary.json and PNG plots. Run it again to finish what is "
        "unfinished. The grid gets the points per parameter that fill the budget (9 -> 3 x 3); "
        "[grid] points is not used.",
    )
    compare.add_argument("config", help="study config (TOML)")
    compare.add_argument(
        "--samplers", default="grid,random,tpe", help="comma-separated (default: grid,random,tpe)"
    )
    compare.add_argument(
        "--pruners",
        help="comma-separated, e.g. none,hyperband,asha (default: the config's [pruner])",
    )
    budget = compare.add_mutually_exclusive_group(required=True)
    budget.add_argument("--budget", type=_positive_int, help="trials per study")
    budget.add_argument(
        "--budget-epochs",
        type=_positive_int,
        metavar="N",
        help="epochs per study, pruned trials' included: equal compute (with --budget, "
        "strategies that prune get budget x task.epochs)",
    )
    compare.add_argument(
        "--repeats", type=_positive_int, default=5, help="studies per strategy (default: 5)"
    )
    compare.add_argument(
        "--workers",
        type=_positive_int,
        help="local workers per study (default: one per GPU, else 1)",
    )
    compare.add_argument("--out", required=True, metavar="DIR", help="where the report goes")
    compare.add_argument(
        "--target",
        type=float,
        help="score that counts as reached for 'epochs to target' (default: the 25th "
        "percentile of all runs' final bests, pooled over every strategy)",
    )
    compare.add_argument("--storage", help=storage_help)
    compare.add_argument("--schema", help=schema_help)
    compare.add_argument("--artifacts", help=artifacts_help)
    compare.add_argument("--grace-s", type=_grace_seconds, help=_GRACE_HELP)
    compare.add_argument("--device-memory", metavar="SIZE", help=_DEVICE_MEMORY_HELP)
    compare.set_defaults(keep_checkpoints=False)


_DEVICE_MEMORY_HELP = (
    "memory of the device a trial trains on, e.g. 80GB (10^9 bytes) or 24GiB (2^30) "
    "(default: $HPSEARCH_DEVICE_MEMORY, else a GPU's free memory; a CPU has no limit)"
)
_PER_TRIAL_HELP = (
    "train each trial data-parallel (DDP) on K GPUs, K processes (on a CPU: K processes, "
    "gloo); with --gpus all the GPUs are grouped K per worker (default: 1)"
)
_GRACE_HELP = (
    "seconds without a heartbeat after which a worker counts as dead and its trial resumes "
    "elsewhere (default: $HPSEARCH_GRACE_S, else 60)"
)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        args.argv = list(sys.argv[1:] if argv is None else argv)  # for the study's note
    except SystemExit as exc:  # --help, or a bad command line (already reported)
        return exc.code if isinstance(exc.code, int) else EXIT_BAD_INPUT
    _setup_logging(args.verbose)
    try:
        return _COMMANDS[args.command](args)
    except (ConfigError, StorageError) as exc:
        print(f"hpsearch: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except RuntimeFailure as exc:
        print(f"hpsearch: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except Exception as exc:
        refused = refused_write(exc)  # a role without the rights: the wrong role, bad input
        if refused is None:
            raise
        print(f"hpsearch: error: {refused}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("hpsearch: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def entry_point() -> None:
    """The `hpsearch` program: `main`, then exit without tearing the interpreter down.

    By the time `main` returns, every result is committed and the connections are closed, so
    the one or two seconds Python spends unloading torch and friends buy nothing; they are
    seconds a spot instance's notice does not have.
    """
    code = main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def cmd_create(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    check_task(config)
    storage = open_storage(_storage_url(args), create=True)
    study, created = _create(storage, config, args.argv)
    verb = "created" if created else "already exists, same config:"
    print(f"study {study.name!r} {verb} in {storage.safe_url}")
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    check_task(config)
    options = _WorkerOptions.from_args(args)
    devices = _local_devices(args.workers, per_trial=options.gpus_per_trial)
    for device in sorted(set(devices)):
        _check_devices(device, options.gpus_per_trial)
    url = _storage_url(args)
    storage = open_storage(url, create=True)
    study, _ = _create(storage, config, args.argv)
    if len(devices) == 1:
        code = _run_worker(storage, study.name, devices[0], options)
    else:
        on_gpus = all(d.startswith("cuda") for d in devices)
        code = _run_worker_processes(url, study.name, devices, options, restart_failed=on_gpus)
    _print_summary(storage, study.name)
    return code


def cmd_worker(args: argparse.Namespace) -> int:
    options = _WorkerOptions.from_args(args)  # bad input is refused before anything is touched
    url = _storage_url(args)
    storage = open_storage(url)
    check_schema(storage)
    study = open_study(storage, args.study)
    devices = (
        _local_devices(None, gpus_only=True, per_trial=options.gpus_per_trial)
        if args.gpus == "all"
        else [args.device or _default_device()]
    )
    # Nothing is registered or claimed before this machine is known to be able to train.
    task = check_task(study.config)
    for device in devices:
        _check_devices(device, options.gpus_per_trial)
    logger.info("task %r: %s", study.config.task.name, task)
    if args.gpus == "all":  # even with one GPU: its child is restarted after a CUDA error
        return _run_worker_processes(url, study.name, devices, options, restart_failed=True)
    return _run_worker(storage, study.name, devices[0], options)


def cmd_try(args: argparse.Namespace) -> int:
    return try_config(args)


def cmd_status(args: argparse.Namespace) -> int:
    if args.watch and args.json:
        raise ConfigError("--watch and --json: choose one")
    if args.interval is not None and not args.watch:
        raise ConfigError("--interval is for --watch")
    storage = open_storage(_storage_url(args))
    check_schema(storage)
    study = open_study(storage, args.study)
    if args.watch:
        from search.monitor.watch import DEFAULT_INTERVAL_S, watch

        return watch(storage, study, interval_s=args.interval or DEFAULT_INTERVAL_S)
    status = study_status(storage, study)
    print(json.dumps(status) if args.json else format_status(status))
    return EXIT_OK


def cmd_dashboard(args: argparse.Namespace) -> int:
    artifacts = args.artifacts or os.environ.get("HPSEARCH_ARTIFACTS") or None
    return serve_dashboard(_storage_url(args), args.host, args.port, artifacts)


def cmd_estimate(args: argparse.Namespace) -> int:
    return run_estimate(args)


def cmd_migrate(args: argparse.Namespace) -> int:
    storage = open_storage(_storage_url(args), create=True)
    roles = RoleNames(args.worker_role, args.viewer_role)
    roles.check()
    revision = upgrade(storage)
    print(f"{storage.safe_url}: Optuna's schema and hpsearch's tables are up to date ({revision})")
    if storage.is_postgres:
        # Tables a migration added are granted to the roles that exist; --create-roles makes them.
        for line in grant_roles(storage, roles, create=args.create_roles):
            print(line)
    elif args.create_roles:
        print("--create-roles: a SQLite file has no roles; nothing to do")
    return EXIT_OK


def cmd_workers(args: argparse.Namespace) -> int:
    storage = open_storage(_storage_url(args))
    check_schema(storage)
    study_id = open_study(storage, args.study).study_id if args.study else None
    listed = list_workers(storage, study_id=study_id, include_stopped=args.all)
    print(json.dumps(workers_json(listed)) if args.json else format_workers(listed))
    return EXIT_OK


def cmd_delete(args: argparse.Namespace) -> int:
    storage = open_storage(_storage_url(args))
    check_schema(storage)
    study = open_study(storage, args.study)
    artifacts = args.artifacts or os.environ.get("HPSEARCH_ARTIFACTS") or None
    store = artifact_store_for(storage, existing_directory(artifacts) if artifacts else None)
    print(delete_study(storage, study, store, force=args.force))
    return EXIT_OK


def cmd_compare(args: argparse.Namespace) -> int:
    from search.compare.run import compare_command  # matplotlib and scipy load only here

    options = _WorkerOptions.from_args(args)
    url = _storage_url(args)
    devices = _local_devices(args.workers)
    for device in sorted(set(devices)):
        check_device(device)
    return compare_command(
        args,
        url=url,
        devices=devices,
        worker_argv=options.argv(),
        artifacts_dir=options.artifacts,
        run_in_process=lambda storage, name, device: _run_worker(storage, name, device, options),
    )


_COMMANDS = {
    "run": cmd_run,
    "create": cmd_create,
    "worker": cmd_worker,
    "try": cmd_try,
    "status": cmd_status,
    "migrate": cmd_migrate,
    "estimate": cmd_estimate,
    "workers": cmd_workers,
    "delete": cmd_delete,
    "dashboard": cmd_dashboard,
    "compare": cmd_compare,
}


# -- helpers ----------------------------------------------------------------------------------


def _storage_url(args: argparse.Namespace) -> str:
    return resolve_url(args.storage, getattr(args, "schema", None))


def _create(
    storage: Storage, config: StudyConfig, argv: Sequence[str] | None = None
) -> tuple[StudyRef, bool]:
    return set_up_study(storage, config, sys.argv[1:] if argv is None else argv)


@dataclass(frozen=True)
class _WorkerOptions:
    """What `run` and `worker` pass on to each worker (and to worker processes they start)."""

    artifacts: str | None
    grace_s: float
    keep_checkpoints: bool
    device_memory: int | None
    """Bytes a trial may use on the worker's device (the pre-training memory check)."""
    gpus_per_trial: int = 1
    """Ranks of each trial (search.worker.trial_group); 1: the trial runs in the worker process."""

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> _WorkerOptions:
        artifacts = args.artifacts or os.environ.get("HPSEARCH_ARTIFACTS") or None
        return cls(
            artifacts=existing_directory(artifacts) if artifacts else None,
            grace_s=_grace(args.grace_s),
            keep_checkpoints=args.keep_checkpoints,
            device_memory=_device_memory(args.device_memory),
            gpus_per_trial=getattr(args, "gpus_per_trial", None) or 1,
        )

    def argv(self) -> list[str]:
        out = ["--grace-s", str(self.grace_s)]
        if self.artifacts:
            out += ["--artifacts", self.artifacts]
        if self.keep_checkpoints:
            out.append("--keep-checkpoints")
        if self.device_memory is not None:
            out += ["--device-memory", str(self.device_memory)]
        if self.gpus_per_trial > 1:
            out += ["--gpus-per-trial", str(self.gpus_per_trial)]
        return out


def _run_worker(storage: Storage, study_name: str, device: str, options: _WorkerOptions) -> int:
    # The database answered once (open_storage); if it restarts now, wait for it.
    retry(lambda: check_schema(storage), "check the schema", attempts=12)
    study = retry(lambda: open_study(storage, study_name), "open the study", attempts=12)
    run_trial = None
    if options.device_memory is not None:
        run_trial = functools.partial(run_training, device_memory=options.device_memory)
    if options.gpus_per_trial > 1:
        group = trial_devices(device, options.gpus_per_trial)
        run_trial = functools.partial(run_trial_group, devices=group)
        device = group_label(group)
    worker = Worker(
        storage,
        study,
        device=device,
        run_trial=run_trial,
        grace_s=options.grace_s,
        artifacts=artifact_store_for(storage, options.artifacts),
        keep_checkpoints=options.keep_checkpoints,
    )
    try:
        return worker.run()
    finally:
        storage.close()


def _run_worker_processes(
    url: str,
    study_name: str,
    devices: list[str],
    options: _WorkerOptions,
    *,
    restart_failed: bool = False,
) -> int:
    """One child process per device; the storage URL travels in the environment, never argv
    (where `ps` would show its password). With `restart_failed` (GPU workers), a child that
    exits 1 is started again (see search.worker.local_gpus)."""
    # This process draws the one progress line; the workers only log.
    env = dict(os.environ, HPSEARCH_STORAGE=url, HPSEARCH_PROGRESS="0")
    gpu_count = _gpu_count() if any(d.startswith("cuda") for d in devices) else 0
    plans = child_plans(devices, env, gpu_count=gpu_count, cpu_count=os.cpu_count() or 1)
    lines: queue.Queue[str] = queue.Queue()

    def start(plan: ChildPlan) -> subprocess.Popen[str]:
        cmd = [sys.executable, "-m", "search", "worker", "--study", study_name]
        cmd += ["--device", plan.device, *options.argv()]
        child = subprocess.Popen(cmd, env=plan.env, stderr=subprocess.PIPE, text=True, bufsize=1)
        threading.Thread(target=_relay, args=(child, lines), daemon=True).start()
        return child

    children = [start(plan) for plan in plans]
    restarts = [0] * len(plans)
    restart_at: list[float | None] = [None] * len(plans)
    ended = [False] * len(plans)
    logger.info("started %d workers on %s", len(children), ", ".join(p.label for p in plans))
    progress = _StudyProgress(url, study_name) if sys.stderr.isatty() else None
    stopping = False

    def forward(signum: int, _frame: Any) -> None:
        nonlocal stopping
        stopping = True
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    def supervise() -> None:
        """Note the children that ended; restart those due (exit 1, within the budget)."""
        for i, child in enumerate(children):
            if ended[i] or child.poll() is None:
                continue
            if restart_at[i] is None:
                delay = restart_delay(child.returncode, restarts[i]) if restart_failed else None
                if delay is None or stopping:
                    ended[i] = True
                    if restart_failed and not stopping and restarts[i] == CHILD_RESTARTS:
                        logger.error(
                            "worker on %s ended (exit %d) after %d restarts: not restarted again",
                            plans[i].label,
                            child.returncode,
                            restarts[i],
                        )
                    continue
                restart_at[i] = time.monotonic() + delay
                logger.warning(
                    "worker on %s exited %d; starting a new one in %.0f s (restart %d of %d)",
                    plans[i].label,
                    child.returncode,
                    delay,
                    restarts[i] + 1,
                    CHILD_RESTARTS,
                )
            elif stopping:
                ended[i] = True
            elif time.monotonic() >= restart_at[i]:
                restart_at[i], restarts[i] = None, restarts[i] + 1
                children[i] = start(plans[i])

    previous = signal.signal(signal.SIGTERM, forward)
    interrupted = False
    try:
        while not all(ended) or not lines.empty():
            try:
                line = lines.get(timeout=0.2)
            except queue.Empty:
                line = None
            except KeyboardInterrupt:
                # The terminal sent Ctrl-C to the children too; they checkpoint and hand back.
                interrupted = stopping = True
                continue
            supervise()
            if progress is not None:
                progress.clear()
            if line is not None:
                sys.stderr.write(line)
            if progress is not None:
                progress.draw()
    finally:
        signal.signal(signal.SIGTERM, previous)
        if progress is not None:
            progress.clear()
    codes = [child.returncode for child in children]
    if interrupted or EXIT_INTERRUPTED in codes:
        return EXIT_INTERRUPTED
    return EXIT_OK if all(c == 0 for c in codes) else EXIT_FAILURE


def _relay(child: subprocess.Popen[str], lines: queue.Queue[str]) -> None:
    assert child.stderr is not None
    for line in child.stderr:
        lines.put(line)


class _StudyProgress:
    """One live line for a study run by several local workers: counts and the best so far."""

    def __init__(self, url: str, study_name: str) -> None:
        self.storage = open_storage(url)
        self.study_name = study_name
        self._text, self._at = "", 0.0

    def draw(self) -> None:
        if time.monotonic() - self._at >= 1.0:
            self._at = time.monotonic()
            try:
                s = study_status(self.storage, open_study(self.storage, self.study_name))
            except Exception:  # a line not redrawn this second costs nothing
                return
            best = (
                ""
                if s["best"] is None
                else (
                    f" | best {s['metric']} {s['best']['value']:.4g} (trial {s['best']['number']})"
                )
            )
            self._text = (
                f"{self.study_name}: {finished_of(s)} "
                f"({s['pruned']} pruned), {s['running']} running{best}"
            )
        sys.stderr.write(f"\r\033[K{self._text}")
        sys.stderr.flush()

    def clear(self) -> None:
        sys.stderr.write("\r\033[K")


def _print_summary(storage: Storage, study_name: str) -> None:
    status = study_status(storage, open_study(storage, study_name))
    print(format_best(status))


def _grace(cli_value: float | None) -> float:
    if cli_value is not None:
        return cli_value
    env = os.environ.get("HPSEARCH_GRACE_S")
    if not env:
        return DEFAULT_GRACE_S
    try:
        return _grace_seconds(env)
    except argparse.ArgumentTypeError as exc:
        raise ConfigError(f"HPSEARCH_GRACE_S={env!r}: {exc}") from None


GRACE_RANGE_S = (1.0, 86400.0)
"""Grace periods hpsearch accepts: a worker heartbeats every grace/6 seconds, so below a
second it would spend its time heartbeating; above a day a dead worker's trial waits a day."""


def _grace_seconds(text: str) -> float:
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


def _device_memory(cli_value: str | None) -> int | None:
    """--device-memory, else $HPSEARCH_DEVICE_MEMORY, in bytes; None if neither is set."""
    name, text = "--device-memory", cli_value
    if text is None:
        name, text = "HPSEARCH_DEVICE_MEMORY", os.environ.get("HPSEARCH_DEVICE_MEMORY") or None
    if text is None:
        return None
    from trainer.memory import parse_size  # trainer.memory imports torch: only when asked

    try:
        return parse_size(text)
    except ValueError as exc:
        raise ConfigError(f"{name}: {exc}") from None


def _gpu_count() -> int:
    import torch  # only here: commands that need no GPU count never load torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _default_device() -> str:
    return "cuda:0" if _gpu_count() else "cpu"


def _local_devices(
    workers: int | None, *, gpus_only: bool = False, per_trial: int = 1
) -> list[str]:
    """Devices for local workers: GPUs round-robin, else CPU. With K GPUs per trial, a
    worker's device is a group of K GPUs (``cuda:0,1``), the visible GPUs cut into groups."""
    gpus = _gpu_count()
    if gpus_only and gpus == 0:
        raise ConfigError("--gpus all: no GPU is visible (CUDA_VISIBLE_DEVICES, drivers?)")
    if per_trial > 1 and gpus:
        try:
            groups = gpu_groups(gpus, per_trial)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        return [groups[i % len(groups)] for i in range(workers or len(groups))]
    n = workers or max(1, gpus)
    return [f"cuda:{i % gpus}" if gpus else "cpu" for i in range(n)]


def _from_value_error(parse: Callable[[str], T]) -> Callable[[str], T]:
    """An argparse type from a parser that raises ValueError with the message to show."""

    @functools.wraps(parse)
    def parse_argument(text: str) -> T:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse_argument


def _refresh_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"not a number of seconds: {text!r}") from None
    if not 0.1 <= value <= 3600:  # also refuses nan and inf
        raise ValueError(f"must be between 0.1 and 3600 seconds, got {text}")
    return value


def _check_devices(device: str, per_trial: int) -> None:
    """check_device for a worker's device, or for each device of its trials' group."""
    if per_trial == 1:
        check_device(device)
        return
    try:
        group = trial_devices(device, per_trial)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    for member in sorted(set(group)):
        check_device(member)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
    logging.getLogger("optuna").setLevel(logging.WARNING)
    for noisy in ("alembic", "sqlalchemy", "accelerate"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", module="optuna")


if __name__ == "__main__":
    entry_point()
