"""What a worker shows of its progress: a live line on a terminal (the trial, its epoch and
value, the study's best so far), and for the dashboard the study's budget used and left and its
paused trials (the study's user attributes, `search.worker.budget_and_promotion.publish_progress`).

    progress = Progress(storage, study, worker_id, rules=rules, health=health, live=None)
    progress.starting(number); progress.show(number, epoch, value)
    progress.publish()        # after a trial; publish(now=True) when the worker leaves
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time

from search.db.status import best_trial
from search.db.storage import Storage
from search.errors import first_line
from search.study.studies import StudyRef
from search.terminal import StatusLine
from search.worker.budget_and_promotion import PUBLISH_EVERY_S, publish_progress
from search.worker.decisions import StudyRules
from search.worker.health import DatabaseHealth

__all__ = ["Progress"]

logger = logging.getLogger("search.worker.progress")


class Progress:
    """One worker's progress line and its budget on the dashboard."""

    def __init__(
        self,
        storage: Storage,
        study: StudyRef,
        worker_id: str,
        *,
        rules: StudyRules,
        health: DatabaseHealth,
        live: bool | None = None,
    ) -> None:
        self.storage, self.study, self.worker_id = storage, study, worker_id
        self.rules, self.health = rules, health
        if live is None:  # a live line on a terminal, unless a parent process draws one
            live = sys.stderr.isatty() and os.environ.get("HPSEARCH_PROGRESS") != "0"
        self.live = live
        self._line = StatusLine(plain=False)
        self._best = ""
        self._published_at = -math.inf

    def starting(self, number: int) -> None:
        if self.live:
            self._best = self._best_so_far()
        self.show(number, None, None)

    def show(self, number: int, epoch: int | None, value: float | None) -> None:
        if not self.live:
            return
        config = self.study.config
        where = (
            f"epoch {epoch}/{config.task.epochs} {config.study.metric} {value:.4f}"
            if epoch
            else "starting"
        )
        self._line.show(f"[{self.worker_id}] trial {number}: {where}{self._best}")

    def close(self) -> None:
        if self.live:
            self._line.clear()

    def publish(self, *, now: bool = False) -> None:
        """The budget used and left, and the paused trials, for the dashboard (the study's user
        attributes): after a trial, at most every PUBLISH_EVERY_S; `now` when leaving. A
        display: a failure to write it is logged, never a fault of the trial or the worker."""
        if not self.rules.limited or self.health.gone is not None:
            return
        if not now and time.monotonic() - self._published_at < PUBLISH_EVERY_S:
            return
        self._published_at = time.monotonic()
        try:
            if now:  # the last word of this worker: worth waiting a moment for the database
                self.health.retry(
                    lambda: publish_progress(self.storage, self.rules.study),
                    "write the study's budget for the dashboard",
                    attempts=3,
                )
            else:
                publish_progress(self.storage, self.rules.study)  # its budgets as raised
        except Exception as exc:
            log = logger.warning if now else logger.debug
            log("could not write the study's budget for the dashboard: %s", first_line(exc))

    def _best_so_far(self) -> str:
        try:
            study = self.study
            best = best_trial(self.storage, study.study_id, study.config.study.direction)
        except Exception:  # the progress line can do without it this time
            return self._best
        if best is None:
            return ""
        return f" | best {best[1]:.4g} (trial {best[0]})"
