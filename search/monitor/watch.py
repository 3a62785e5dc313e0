"""`hpsearch status --watch`: the study's status, live.

On a terminal the table is redrawn in place every `--interval` seconds: trials by state, the
best so far, and each running trial's worker, epoch, last score and heartbeat age. Elsewhere (a
log file, a pipe) it prints plain lines, one block each time something changed, each line
stamped with the time. It reads in one read-only transaction per refresh (`study_status`), so
watching never slows the workers; while the database is away it says so and keeps trying.
It ends when the study is finished (exit 0) or on Ctrl-C (exit 0: stopping is how a watch ends).

Example::

    $ hpsearch status --study digits --watch --interval 2
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import sys
import time
from typing import TextIO

from search.db.storage import Storage, is_transient
from search.errors import first_line
from search.monitor.status import StudyStatus, format_budget, format_leading_paused, study_status
from search.monitor.stopping import stop_on_signals
from search.study.studies import StudyRef

__all__ = ["DEFAULT_INTERVAL_S", "format_live", "watch"]

DEFAULT_INTERVAL_S = 2.0


def watch(
    storage: Storage,
    study: StudyRef,
    *,
    interval_s: float = DEFAULT_INTERVAL_S,
    out: TextIO | None = None,
) -> int:
    """Show the study's status until it is finished or Ctrl-C; returns 0."""
    out = out or sys.stdout
    view = _TerminalView(out) if out.isatty() else _LinesView(out)
    try:
        with stop_on_signals():  # Ctrl-C or SIGTERM: a clean stop, exit 0
            while True:
                try:
                    status = study_status(storage, study)
                except Exception as exc:
                    if not is_transient(exc):
                        raise
                    view.unreachable(first_line(exc))
                else:
                    view.show(status)
                    if status.done:
                        view.close("study finished")
                        return 0
                time.sleep(interval_s)
    except KeyboardInterrupt:
        view.close("stopped")
        return 0


def format_live(status: StudyStatus) -> list[str]:
    """The table's lines: counts, the best so far, the running trials."""
    best = status.best
    lines = [
        f"study {status.study}: {status.finished_text} ({status.metric}, {status.direction})",
        f"  complete {status.complete}  pruned {status.pruned}  "
        f"failed {status.failed}  running {status.running}  "
        f"waiting {status.waiting}  paused {status.paused}  live workers {status.live_workers}",
        "  best so far: none yet"
        if best is None
        else f"  best so far: trial {best.number}  {status.metric} {_score(best.value)}",
    ]
    budget = format_budget(status)
    if budget:
        lines.insert(2, budget)
    paused = format_leading_paused(status)
    if paused:
        lines.insert(4 if budget else 3, paused)
    if status.running_trials:
        lines.append(f"  {'trial':>5}  {'epoch':>5}  {'last score':>10}  {'heartbeat':>9}  worker")
        for r in status.running_trials:
            age = r.heartbeat_age_s
            heartbeat = "-" if age is None else f"{age:.0f}s ago"
            worker = (
                f"{r.worker_id} ({r.hostname}, {r.device})" if r.worker_id else "(being sampled)"
            )
            last = "-" if r.last_value is None else _score(r.last_value)
            lines.append(f"  {r.number:>5}  {r.epoch:>5}  {last:>10}  {heartbeat:>9}  {worker}")
    return lines


def _score(value: float) -> str:
    return f"{value:.4g}" if math.isfinite(value) else str(value)


class _TerminalView:
    """Redraws the table in place: the cursor goes back up over the previous drawing."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.drawn = 0

    def show(self, status: StudyStatus) -> None:
        lines = format_live(status)
        lines.append(f"  (every refresh; Ctrl-C stops; {time.strftime('%H:%M:%S')})")
        self._draw(lines)

    def unreachable(self, why: str) -> None:
        self._draw([f"database unreachable ({why}); retrying", ""])

    def _draw(self, lines: list[str]) -> None:
        width = max(20, shutil.get_terminal_size().columns - 1)  # a wrapped line breaks the redraw
        up = f"\033[{self.drawn}F" if self.drawn else "\r"
        body = "".join(f"\033[2K{line[:width]}\n" for line in lines)
        self.out.write(f"{up}{body}\033[J")
        self.out.flush()
        self.drawn = len(lines)

    def close(self, why: str) -> None:
        self.out.write(f"{why}\n")
        self.out.flush()


class _LinesView:
    """Plain lines for logs and pipes: the table again, stamped, whenever it changed."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.last: list[str] | None = None

    def show(self, status: StudyStatus) -> None:
        # Heartbeat ages change every second; a block is printed only when something else did.
        key = format_live(_without_ages(status))
        if key == self.last:
            return
        self.last = key
        stamp = time.strftime("%H:%M:%S")
        for line in format_live(status):
            self.out.write(f"{stamp} {line}\n")
        self.out.flush()

    def unreachable(self, why: str) -> None:
        self.last = None
        self.out.write(f"{time.strftime('%H:%M:%S')} database unreachable ({why}); retrying\n")
        self.out.flush()

    def close(self, why: str) -> None:
        self.out.write(f"{time.strftime('%H:%M:%S')} {why}\n")
        self.out.flush()


def _without_ages(status: StudyStatus) -> StudyStatus:
    ageless = [dataclasses.replace(r, heartbeat_age_s=None) for r in status.running_trials]
    return dataclasses.replace(status, running_trials=ageless)
