"""The live line a parent process draws below its local workers' log lines (`hpsearch run`)."""

from __future__ import annotations

import sys
import time

from search.db.storage import open_storage
from search.monitor.status import study_status
from search.study.studies import open_study

__all__ = ["StudyProgress"]


class StudyProgress:
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
            done = s["complete"] + s["pruned"] + s["failed"]
            best = (
                ""
                if s["best"] is None
                else (
                    f" | best {s['metric']} {s['best']['value']:.4g} (trial {s['best']['number']})"
                )
            )
            self._text = (
                f"{self.study_name}: {done}/{s['n_trials']} finished "
                f"({s['pruned']} pruned), {s['running']} running{best}"
            )
        sys.stderr.write(f"\r\033[K{self._text}")
        sys.stderr.flush()

    def clear(self) -> None:
        sys.stderr.write("\r\033[K")
