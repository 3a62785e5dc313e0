"""The sbatch script of `hpsearch slurm`: a Slurm job array of workers on one study.

Each array task asks for its node's GPUs (``--gres=gpu:N``) and runs one ``hpsearch worker``
with ``--gpus all`` (one worker process per GPU; on a CPU-only task, ``--device cpu``). The worker
runs as a job *step* (``srun ...``), so that every way Slurm stops a task reaches it as
SIGTERM: ``--signal=TERM@GRACE`` before the time limit (sent to the job's steps, not to the
batch shell), preemption and ``scancel`` (every process of the job), and
``scancel --signal=TERM`` (the steps). On SIGTERM the worker checkpoints its trial, hands it back
and exits 0; another task (or the same one, requeued) resumes it. ``--requeue`` lets a preempted
task go back to the queue: Slurm requeues it only if it is still running when the preemption's
grace time ends, so a task whose worker has already handed back requeues itself (``scontrol
requeue``, when ``scontrol show job`` has a PreemptTime). ``--open-mode=append`` keeps its log
across restarts.

The database URL is never in the script nor on a command line (``squeue``, ``ps`` and
``scontrol show job`` show those): the job takes ``$HPSEARCH_STORAGE`` from the environment
sbatch was run in (``--export=ALL``), or reads it from a file only its owner can read.

Pure: this module builds text; `search.commands.slurm` checks the study and submits.

Example::

    >>> spec = SlurmJob(study="digits", tasks=4, gpus_per_task=2, time_s=3600, grace_s=300)
    >>> print(sbatch_script(spec, python="/opt/venv/bin/python").splitlines()[3])
    #SBATCH --array=0-3
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "MAX_GRACE_S",
    "SlurmJob",
    "parse_memory",
    "parse_slurm_time",
    "safe_file_part",
    "sbatch_script",
    "slurm_time",
]

MAX_GRACE_S = 65535
"""The largest lead time sbatch's ``--signal=SIG@TIME`` accepts, in seconds."""

_TIME_FORMS = (
    # Slurm's time formats (sbatch --time), most specific first.
    (re.compile(r"(\d+)-(\d+):(\d+):(\d+)"), ("d", "h", "m", "s")),
    (re.compile(r"(\d+)-(\d+):(\d+)"), ("d", "h", "m")),
    (re.compile(r"(\d+)-(\d+)"), ("d", "h")),
    (re.compile(r"(\d+):(\d+):(\d+)"), ("h", "m", "s")),
    (re.compile(r"(\d+):(\d+)"), ("m", "s")),
    (re.compile(r"(\d+)"), ("m",)),
)
_UNIT_S = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_MEMORY = re.compile(r"\d+[KMGT]?", re.IGNORECASE)


def parse_slurm_time(text: str) -> int:
    """Seconds in a Slurm time limit: ``minutes``, ``minutes:seconds``,
    ``hours:minutes:seconds``, ``days-hours``, ``days-hours:minutes``,
    ``days-hours:minutes:seconds``. ValueError names the accepted forms.

    Example::

        >>> parse_slurm_time("1-02:00:00"), parse_slurm_time("90"), parse_slurm_time("2:30")
        (93600, 5400, 150)
    """
    for pattern, units in _TIME_FORMS:
        found = pattern.fullmatch(text.strip())
        if found:
            seconds = sum(int(v) * _UNIT_S[u] for v, u in zip(found.groups(), units, strict=True))
            if seconds <= 0:
                raise ValueError(f"time limit {text!r} is zero")
            return seconds
    raise ValueError(
        f"time limit {text!r}: use minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"
    )


def slurm_time(seconds: int) -> str:
    """``D-HH:MM:SS`` for sbatch (Slurm rounds a limit with seconds up to the next minute)."""
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"


def parse_memory(text: str) -> str:
    """Memory per node as sbatch ``--mem`` takes it (``64G``, ``500M``, ``16000``)."""
    if not _MEMORY.fullmatch(text.strip()):
        raise ValueError(f"memory {text!r}: a number with an optional unit K, M, G or T (64G)")
    return text.strip().upper()


def safe_file_part(name: str) -> str:
    """A study name as it can appear in a job name and a log file name (no ``/``, no ``%``)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)[:64] or "study"


@dataclass(frozen=True, kw_only=True)
class SlurmJob:
    """What one `hpsearch slurm` job array asks of Slurm, checked by the caller."""

    study: str
    """The study every task's worker joins (it exists: workers never create one)."""
    tasks: int
    """Array tasks (``--array=0-(tasks-1)``): nodes, or parts of nodes, working at once."""
    gpus_per_task: int
    """``--gres=gpu:N`` per task, one worker process per GPU; 0: a CPU-only worker."""
    grace_s: int
    """SIGTERM this many seconds before the time limit (``--signal=TERM@grace_s``): long
    enough to finish the current step and write a checkpoint."""
    time_s: int | None = None
    """The time limit per task (``--time``); None: the partition's default."""
    partition: str | None = None
    cpus_per_task: int | None = None
    mem: str | None = None
    """Memory per node (``--mem``), e.g. ``64G``."""
    log_dir: Path = Path(".")
    """Where each task's log goes: ``hpsearch-<study>-<array job>_<task>.out``."""
    storage_file: Path | None = None
    """A file holding the database URL (mode 0600, on a filesystem the nodes see); None: the
    job takes $HPSEARCH_STORAGE from the environment sbatch runs in."""
    worker_args: tuple[str, ...] = ()
    """More ``hpsearch worker`` arguments (``--artifacts DIR``, ``--gpus-per-trial K``, ...)."""
    sbatch_options: tuple[str, ...] = ()
    """More ``#SBATCH`` options, verbatim (``--account=ml``, ``--qos=low``)."""
    setup: tuple[str, ...] = field(default=())
    """Shell lines run before the worker (``module load cuda``)."""


def sbatch_script(job: SlurmJob, *, python: str) -> str:
    """The sbatch script for `job`; `python` runs ``-m search worker`` on the nodes."""
    name = safe_file_part(job.study)
    log = job.log_dir / f"hpsearch-{name}-%A_%a.out"
    options = [
        f"--job-name=hpsearch-{name}",
        f"--array=0-{job.tasks - 1}",
        "--nodes=1",
        "--ntasks=1",
    ]
    if job.gpus_per_task:
        options.append(f"--gres=gpu:{job.gpus_per_task}")
    if job.cpus_per_task:
        options.append(f"--cpus-per-task={job.cpus_per_task}")
    if job.mem:
        options.append(f"--mem={job.mem}")
    if job.time_s is not None:
        options.append(f"--time={slurm_time(job.time_s)}")
    if job.partition:
        options.append(f"--partition={job.partition}")
    options += [
        f"--signal=TERM@{job.grace_s}",
        "--requeue",
        "--open-mode=append",
        f"--output={log}",
        "--export=ALL",
        *job.sbatch_options,
    ]
    lines = ["#!/bin/bash", f"# hpsearch workers for study {job.study!r}: one per array task"]
    lines += [f"#SBATCH {option}" for option in options]
    lines += [
        "set -euo pipefail",
        "",
        "# The database URL: from the environment sbatch ran in, or a file only you can read;",
        "# never in this script or on a command line (squeue and ps show those).",
    ]
    if job.storage_file is not None:
        quoted = shlex.quote(str(job.storage_file))
        lines += [
            f'HPSEARCH_STORAGE="$(cat -- {quoted})"',
            "export HPSEARCH_STORAGE",
        ]
    else:
        lines += [
            'if [ -z "${HPSEARCH_STORAGE:-}" ]; then',
            '    echo "hpsearch: error: HPSEARCH_STORAGE is not set where sbatch ran '
            '(export it, or use hpsearch slurm --storage-file)" >&2',
            "    exit 2",
            "fi",
        ]
    lines += [*job.setup, ""]
    worker = [python, "-m", "search", "worker", "--study", job.study]
    worker += ["--gpus", "all"] if job.gpus_per_task else ["--device", "cpu"]
    worker += list(job.worker_args)
    step = ["srun", "--ntasks=1"]
    if job.cpus_per_task:  # Slurm 22.05's srun does not inherit --cpus-per-task from sbatch
        step.append(f"--cpus-per-task={job.cpus_per_task}")
    lines += [
        "# The worker is the job step's task, so Slurm's SIGTERM (time limit, preemption,",
        "# scancel) reaches it: it checkpoints its trial, hands it back and exits 0. This shell",
        "# gets SIGTERM too when the whole job is stopped: it waits for the worker meanwhile.",
        "trap 'echo \"hpsearch: SIGTERM: waiting for the worker to hand its trial back\" >&2' TERM",
        "status=0",
        shlex.join(step + worker) + " || status=$?",
        "# Slurm requeues a preempted task only if it still runs when the grace time ends; a",
        "# worker that handed its trial back and exited earlier is requeued here instead.",
        'info="$(scontrol show job "$SLURM_JOB_ID" 2>/dev/null || true)"',
        'if [ "$status" -eq 0 ] && [[ "$info" =~ PreemptTime=[0-9] ]]; then',
        '    echo "hpsearch: preempted: requeueing job $SLURM_JOB_ID" >&2',
        '    scontrol requeue "$SLURM_JOB_ID" || true',
        "fi",
        'exit "$status"',
    ]
    return "\n".join(lines) + "\n"
