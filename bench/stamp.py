"""Where a result came from, written into every result file a harness writes: the commit of the
code that made it, the command as typed, the date and the machine's load.

A JSON result gets it as its first key, ``"made"`` (a harness whose result is a list writes
``{"made": ..., "results": [...]}``); a JSON-lines cache gets it on every row, since a cache
grows over several runs, perhaps of several commits. Result files written before this stamp
(bench/results/ up to commit 663c1df) carry none: the commit that added them is in git log.
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parents[1]

__all__ = ["append_line", "stamp", "write_json"]


def stamp() -> dict[str, Any]:
    """The commit (``+changes`` when tracked files differ from it), the command line, the UTC
    date and the 1/5/15-minute load averages, now."""
    return {
        "commit": _commit(),
        "command": shlex.join(["python", *sys.orig_argv[1:]]),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "load": [round(x, 2) for x in os.getloadavg()],
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
    }


def write_json(path: str | Path, result: dict[str, Any] | list[Any]) -> None:
    """Write `result` to `path` as JSON, stamped (a list goes under ``"results"``)."""
    body = result if isinstance(result, dict) else {"results": result}
    Path(path).write_text(json.dumps({"made": stamp(), **body}, indent=2) + "\n")


def append_line(out: IO[str], row: dict[str, Any]) -> None:
    """Append `row` to an open JSON-lines file, stamped."""
    out.write(json.dumps({**row, "made": stamp()}) + "\n")
    out.flush()


@functools.cache
def _commit() -> str | None:
    """The checkout's commit (None outside a git checkout)."""

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True
        )
        return done.stdout.strip()

    try:
        head = git("rev-parse", "--short=12", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return None
    return f"{head}+changes" if changed else head
