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

__all__ = ["append_line", "open_to_append", "read_lines", "stamp", "unwritable", "write_json"]


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


def read_lines(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a JSON-lines cache ([] if there is no file). A line that is not a JSON
    object with a ``"key"`` (cut short by a run killed while it appended) is left out with a
    warning naming its line: the work on it runs again. A file with lines but none of them
    rows is not such a cache (ValueError), so that no run appends to it."""
    if not os.path.exists(path):
        return []
    rows, bad = [], []
    with open(path) as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                row = None
            if isinstance(row, dict) and "key" in row:
                rows.append(row)
            else:
                bad.append(number)
    if bad and not rows:
        raise ValueError(f"{path} is not a cache of the benchmarks (no line is a row)")
    if bad:
        shown = ", ".join(map(str, bad[:5])) + (" ..." if len(bad) > 5 else "")
        print(
            f"{path}: {len(bad)} line(s) cut short or unreadable, left out (their work runs "
            f"again): line {shown}",
            file=sys.stderr,
        )
    return rows


def open_to_append(path: str | Path) -> IO[str]:
    """`path` opened to append lines, each on a line of its own even after a line that a
    killed run cut short."""
    fh = open(path, "a+")  # noqa: SIM115 (the caller closes it)
    if fh.tell() > 0:
        fh.seek(fh.tell() - 1)
        last = fh.read(1)
        if last != "\n":
            fh.write("\n")
    return fh


def unwritable(flag: str, path: str | Path) -> str | None:
    """Why `path` cannot be written, as one line naming `flag` (None: it can), without writing
    anything: for the output files a harness checks before it runs, not after."""
    path = Path(path)
    if path.is_dir():
        return f"{flag}: {path} is a directory"
    if not path.parent.is_dir():
        return f"{flag}: no directory {path.parent}"
    if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        return f"{flag}: cannot write {path}"
    return None


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
