"""Progress lines of a study: the one `hpsearch run` draws below its local workers' log lines,
and `hpsearch compare`'s line per study (both on `search.terminal.StatusLine`)."""

from __future__ import annotations

import threading
import time

from search.db.storage import Storage, open_storage
from search.monitor.status import StudyStatus, study_status
from search.study.studies import StudyRef, open_study
from search.terminal import StatusLine

__all__ = ["StudyProgress", "StudyProgressThread", "describe", "progress_text"]


class StudyProgress:
    """One live line for a study run by several local workers: counts and the best so far."""

    def __init__(self, url: str, study_name: str) -> None:
        self.storage = open_storage(url)
        self.study_name = study_name
        self.line = StatusLine(plain=False)
        self._text, self._at = "", 0.0

    def draw(self) -> None:
        if time.monotonic() - self._at >= 1.0:
            self._at = time.monotonic()
            try:
                s = study_status(self.storage, open_study(self.storage, self.study_name))
            except Exception:  # a line not redrawn this second costs nothing
                return
            self._text = f"{self.study_name}: {progress_text(s)}"
        self.line.show(self._text)

    def clear(self) -> None:
        self.line.clear()


class StudyProgressThread:
    """One line per study of a comparison: `where` (strategy, repeat), trials done, best so far.
    Redrawn every second on a terminal; elsewhere (a log file, CI) one line each time a trial
    finishes."""

    def __init__(self, storage: Storage, ref: StudyRef, where: str) -> None:
        self.storage, self.ref, self.where = storage, ref, where
        self.line = StatusLine()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="compare-progress", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._draw()
        self.line.keep()

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            self._draw()

    def _draw(self) -> None:
        try:
            text = f"{self.where}: {describe(study_status(self.storage, self.ref))}"
        except Exception:  # a line not redrawn this second costs nothing
            return
        self.line.show(text)


def describe(status: StudyStatus) -> str:
    """``9/12 trials done, 3 pruned, best val_accuracy 0.97 (trial 4)``."""
    best = status.best
    shown = "none yet" if best is None else f"{best.value:.4g} (trial {best.number})"
    pruned = f", {status.pruned} pruned" if status.pruned else ""
    failed = f", {status.failed} failed" if status.failed else ""
    epochs = (status.budget or {}).get("epochs")
    spent = "" if epochs is None else f", {epochs['used']}/{epochs['budget']} epochs"
    of = f"/{status.n_trials}" if status.n_trials else ""
    return f"{status.finished}{of} trials done{pruned}{failed}{spent}, best {status.metric} {shown}"


def progress_text(s: StudyStatus) -> str:
    """``3 finished (2 pruned), 2 running, 9 paused | best val_accuracy 0.95 (trial 4) |
    leading paused 0.986 (trial 7, rung 9)``: under ASHA the leader is often a paused trial,
    long before (and beside) any finished one."""
    paused = f", {s.paused} paused" if s.paused else ""
    best = (
        "" if s.best is None else f" | best {s.metric} {s.best.value:.4g} (trial {s.best.number})"
    )
    p = s.leading_paused
    lead = "" if p is None else f" | leading paused {p.value:.4g} (trial {p.number}, rung {p.rung})"
    return f"{s.finished_text} ({s.pruned} pruned), {s.running} running{paused}{best}{lead}"
