"""What made a trial: code version, hardware and library versions (trial user attributes)."""

from __future__ import annotations

import functools
import importlib.metadata as md
import platform
import socket
import subprocess
import sys
from typing import Any

__all__ = ["code_version", "environment"]


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
    torch = sys.modules.get("torch")
    if torch is not None:
        info["torch_version"] = torch.__version__
        info["cuda_version"] = torch.version.cuda
    return info


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None
