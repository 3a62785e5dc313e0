"""What made a trial: code version, hardware and library versions (trial user attributes)."""

from __future__ import annotations

import functools
import importlib.metadata as md
import os
import platform
import socket
import subprocess
import sys
from typing import Any

__all__ = ["code_version", "environment", "launched_by", "launched_by_label"]


@functools.cache
def code_version() -> dict[str, Any]:
    """The git commit of the working directory's code, and whether the tree had changes.

    Computed once per process: the code a worker runs does not change under it.
    """

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(
                ["git", *args], capture_output=True, text=True, timeout=10, check=True
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip()

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"git_commit": None, "git_dirty": None}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"git_commit": commit, "git_dirty": bool(status)}


@functools.cache
def environment() -> dict[str, Any]:
    """Host and library versions (torch and CUDA only if torch is already loaded)."""
    info: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "python_version": platform.python_version(),
        "hpsearch_version": _version("hpsearch"),
        "optuna_version": _version("optuna"),
    }
    scheduler = launched_by()
    if scheduler is not None:
        info["launched_by"] = scheduler
    torch = sys.modules.get("torch")
    if torch is not None:
        info["torch_version"] = torch.__version__
        info["cuda_version"] = torch.version.cuda
    return info


_SLURM_VARIABLES = {
    "job_id": "SLURM_JOB_ID",
    "array_job_id": "SLURM_ARRAY_JOB_ID",
    "array_task_id": "SLURM_ARRAY_TASK_ID",
    "restart_count": "SLURM_RESTART_COUNT",
    "node": "SLURMD_NODENAME",
}
_KUBERNETES_VARIABLES = {
    "namespace": "POD_NAMESPACE",
    "job_completion_index": "JOB_COMPLETION_INDEX",
    "node": "NODE_NAME",
}


def launched_by(env: dict[str, str] | None = None) -> dict[str, str] | None:
    """The scheduler that started this process, from its environment; None if none did.

    Slurm: the job id, and for a job array the array job and task ids (``1234_5``, as `squeue`
    and `sacct` name it) and how often the task was requeued. Kubernetes: the pod's name
    (``$POD_NAME`` from the downward API, else ``$HOSTNAME``, which is the pod's name), its
    namespace and, in an indexed Job, the completion index. deploy/k8s/ sets these.

    Example::

        >>> launched_by({"SLURM_JOB_ID": "1239", "SLURM_ARRAY_JOB_ID": "1234",
        ...              "SLURM_ARRAY_TASK_ID": "5"})
        {'scheduler': 'slurm', 'job_id': '1239', 'array_job_id': '1234', 'array_task_id': '5'}
    """
    env = os.environ if env is None else env
    if env.get("SLURM_JOB_ID"):
        found = {"scheduler": "slurm"}
        variables = _SLURM_VARIABLES
    elif env.get("KUBERNETES_SERVICE_HOST") or env.get("POD_NAME"):
        found = {"scheduler": "kubernetes", "pod": env.get("POD_NAME") or env.get("HOSTNAME", "")}
        variables = _KUBERNETES_VARIABLES
    else:
        return None
    found.update({key: env[name] for key, name in variables.items() if env.get(name)})
    return found


def launched_by_label(launched: dict[str, str] | None) -> str:
    """One word: ``slurm:1234_5``, ``slurm:1239``, ``k8s:hpsearch-worker-2-x7k``, or ``-``."""
    if not launched:
        return "-"
    if launched.get("scheduler") == "slurm":
        if "array_task_id" in launched:
            return f"slurm:{launched.get('array_job_id')}_{launched['array_task_id']}"
        return f"slurm:{launched.get('job_id')}"
    if launched.get("scheduler") == "kubernetes":
        return f"k8s:{launched.get('pod')}"
    return str(launched.get("scheduler", "-"))


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None
