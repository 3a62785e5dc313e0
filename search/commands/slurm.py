"""`hpsearch slurm`: an sbatch job array of workers for a study; prints it, or submits it.

Checked before anything is printed or submitted (bad input: one line, exit 2): the storage is a
PostgreSQL database that answers and holds the study; the time limit is in a Slurm format and
longer than the grace; a ``--storage-file`` is readable by its owner only. See
`search.worker.slurm_script` for what the script does.
"""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

from search.commands.common import SCHEMA_HELP, STORAGE_HELP, positive_int, whole_number
from search.db.migrate import check_schema
from search.db.storage import StorageError, open_storage, resolve_url
from search.study.settings import ConfigError
from search.study.studies import open_study
from search.worker.artifacts import existing_directory
from search.worker.slurm_script import (
    MAX_GRACE_S,
    SlurmJob,
    parse_memory,
    parse_slurm_time,
    safe_file_part,
    sbatch_script,
)

__all__ = ["DEFAULT_SLURM_GRACE_S", "add_parser", "cmd_slurm"]

DEFAULT_SLURM_GRACE_S = 300
"""SIGTERM 5 minutes before the time limit: a large model's checkpoint, written to the database
or a shared directory, takes a minute or two; Slurm may send it up to 60 s earlier still."""


def add_parser(sub: Any) -> None:
    """The `slurm` subcommand; its action is `cmd_slurm`."""
    slurm = sub.add_parser(
        "slurm",
        help="an sbatch job array of workers for a study (prints it; --submit submits it)",
        description="Print an sbatch script for a job array of K tasks, each running "
        "`hpsearch worker --gpus all` on its node's N GPUs (CPU-only with --gpus-per-task 0). "
        "Slurm's SIGTERM (GRACE seconds before the time limit, preemption, scancel) makes a "
        "worker checkpoint its trial and hand it back; tasks are requeued when preempted. The "
        "database URL never appears in the script: the job takes $HPSEARCH_STORAGE from the "
        "environment sbatch runs in, or reads --storage-file. Exit codes: 0 printed or "
        "submitted, 1 sbatch failed, 2 bad input (nothing submitted).",
    )
    slurm.add_argument("--study", required=True, help="study name (create it first)")
    slurm.add_argument("--tasks", type=positive_int, required=True, metavar="K", help="array tasks")
    slurm.add_argument(
        "--gpus-per-task",
        type=whole_number,
        required=True,
        metavar="N",
        help="GPUs per task (--gres=gpu:N), one worker process each; 0: a CPU-only worker",
    )
    slurm.add_argument(
        "--time", metavar="T", help="time limit per task, e.g. 4:00:00 or 1-00:00:00"
    )
    slurm.add_argument("--partition", metavar="P")
    slurm.add_argument("--cpus-per-task", type=positive_int, metavar="C")
    slurm.add_argument("--mem", metavar="SIZE", help="memory per node, e.g. 64G")
    slurm.add_argument(
        "--grace",
        type=_grace,
        default=DEFAULT_SLURM_GRACE_S,
        metavar="S",
        help="seconds before the time limit at which Slurm sends SIGTERM, for the worker to "
        f"checkpoint and hand its trial back (default: {DEFAULT_SLURM_GRACE_S})",
    )
    slurm.add_argument(
        "--output",
        default=".",
        metavar="DIR",
        help="an existing directory for the tasks' logs, hpsearch-<study>-<job>_<task>.out "
        "(default: here)",
    )
    slurm.add_argument("--storage", help=STORAGE_HELP + "; checked here, never written out")
    slurm.add_argument(
        "--storage-file",
        metavar="PATH",
        help="a file holding the database URL, readable only by you (chmod 600), on a "
        "filesystem the nodes see: the job reads it there (default: the job takes "
        "$HPSEARCH_STORAGE from the environment sbatch runs in)",
    )
    slurm.add_argument("--schema", help=SCHEMA_HELP)
    slurm.add_argument(
        "--artifacts",
        metavar="DIR",
        help="a shared directory for checkpoints, passed to the workers (default: the database)",
    )
    slurm.add_argument(
        "--gpus-per-trial", type=positive_int, metavar="K", help="passed to the workers"
    )
    slurm.add_argument(
        "--sbatch",
        dest="sbatch_options",
        action="append",
        default=[],
        metavar="OPTION",
        help="another #SBATCH option, e.g. --sbatch=--account=ml (repeatable)",
    )
    slurm.add_argument(
        "--setup",
        action="append",
        default=[],
        metavar="LINE",
        help="a shell line run before the worker, e.g. 'module load cuda' (repeatable)",
    )
    slurm.add_argument(
        "--python",
        default=sys.executable,
        help="the Python the nodes run `-m search worker` with (default: this one)",
    )
    slurm.add_argument("--submit", action="store_true", help="submit it with sbatch")
    slurm.set_defaults(handler=cmd_slurm)


def cmd_slurm(args: argparse.Namespace) -> int:
    time_s = None
    if args.time is not None:
        try:
            time_s = parse_slurm_time(args.time)
        except ValueError as exc:
            raise ConfigError(f"--time: {exc}") from None
        if args.grace >= time_s:
            raise ConfigError(
                f"--grace {args.grace} s is not shorter than the time limit --time {args.time} "
                f"({time_s} s): the worker would be told to stop before it starts"
            )
    try:
        mem = parse_memory(args.mem) if args.mem is not None else None
    except ValueError as exc:
        raise ConfigError(f"--mem: {exc}") from None
    if args.gpus_per_trial and args.gpus_per_task % args.gpus_per_trial:
        raise ConfigError(
            f"--gpus-per-trial {args.gpus_per_trial} does not divide --gpus-per-task "
            f"{args.gpus_per_task}"
        )
    log_dir = Path(args.output).resolve()
    if not log_dir.is_dir():
        raise ConfigError(f"--output {args.output}: no such directory (Slurm does not create it)")
    storage_file = Path(args.storage_file).resolve() if args.storage_file else None
    url = resolve_url(_url_from_file(storage_file) if storage_file else args.storage, args.schema)
    storage = open_storage(url)
    try:
        if not storage.is_postgres:
            raise StorageError(
                f"{storage.safe_url}: the tasks of a job array run on several nodes and need a "
                "database they all reach: PostgreSQL (--storage / $HPSEARCH_STORAGE)"
            )
        check_schema(storage)
        study = open_study(storage, args.study)
    finally:
        storage.close()
    worker_args: list[str] = []
    if args.schema:
        worker_args += ["--schema", args.schema]
    if args.artifacts:
        worker_args += ["--artifacts", str(Path(existing_directory(args.artifacts)).resolve())]
    if args.gpus_per_trial:
        worker_args += ["--gpus-per-trial", str(args.gpus_per_trial)]
    job = SlurmJob(
        study=study.name,
        tasks=args.tasks,
        gpus_per_task=args.gpus_per_task,
        grace_s=args.grace,
        time_s=time_s,
        partition=args.partition,
        cpus_per_task=args.cpus_per_task,
        mem=mem,
        log_dir=log_dir,
        storage_file=storage_file,
        worker_args=tuple(worker_args),
        sbatch_options=tuple(args.sbatch_options),
        setup=tuple(args.setup),
    )
    script = sbatch_script(job, python=args.python)
    if not args.submit:
        sys.stdout.write(script)
        if args.storage and storage_file is None:
            print(
                "note: the job reads $HPSEARCH_STORAGE where sbatch runs (the script holds no "
                "URL): export it there, or use --storage-file",
                file=sys.stderr,
            )
        return 0
    return _submit(script, url if storage_file is None else None, job)


def _submit(script: str, url: str | None, job: SlurmJob) -> int:
    """sbatch reads the script on stdin; the URL travels in its environment (--export=ALL)."""
    sbatch = shutil.which("sbatch")
    if sbatch is None:
        raise ConfigError("--submit: no sbatch on PATH (run it on a Slurm login node)")
    env = dict(os.environ)
    if url is not None:
        env["HPSEARCH_STORAGE"] = url
    done = subprocess.run(
        [sbatch, "--parsable"], input=script, env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        message = " ".join(done.stderr.split()) or f"exit {done.returncode}"
        print(f"hpsearch: error: sbatch refused the job: {message}", file=sys.stderr)
        return 1
    job_id = done.stdout.strip().split(";")[0]
    log = job.log_dir / f"hpsearch-{safe_file_part(job.study)}-{job_id}_<task>.out"
    print(
        f"submitted job array {job_id}: {job.tasks} task(s) of study {job.study!r}; logs: "
        f"{log}; to stop them politely: scancel --signal=TERM {job_id}"
    )
    return 0


def _url_from_file(path: Path) -> str:
    try:
        mode = path.stat().st_mode
        text = path.read_text().strip()
    except OSError as exc:
        raise ConfigError(f"--storage-file {path}: {exc.strerror}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(
            f"--storage-file {path}: others can read it (mode {stat.S_IMODE(mode):o}): "
            f"chmod 600 {path}"
        )
    if not text:
        raise ConfigError(f"--storage-file {path}: empty (it holds the database URL)")
    return text


def _grace(text: str) -> int:
    value = whole_number(text)
    if not 1 <= value <= MAX_GRACE_S:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_GRACE_S} s, got {value}")
    return value
