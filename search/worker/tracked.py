"""The study's experiment trackers as a worker uses them: each call returns at once.

The worker calls `trial_started`, `reporting` (which wraps the trial's report callback),
`trial_ended` and `close`; the tracker calls themselves run on one background thread per
tracker (`search.tracking.sender`), so a slow or unreachable tracker never slows or fails a
trial. Without ``[tracking]`` in the study's config every call does nothing.
"""

from __future__ import annotations

import functools
import socket
import time
from collections.abc import Callable
from typing import Any

from search.study.studies import StudyRef
from search.tracking.records import TrialEnded, TrialStarted, provenance_tags
from search.tracking.sender import Sender
from search.tracking.trackers import open_trackers
from search.worker.provenance import code_version
from search.worker.trial import TrialOutcome, TrialRun, trial_end

__all__ = ["FLUSH_S", "HURRY_S", "TrialTracking"]

FLUSH_S = 10.0
"""Longest a leaving worker waits for its tracker without an update getting through (then it
says what was not sent)."""
HURRY_S = 5.0
"""Longest a worker stopped by SIGTERM or Ctrl-C sends its queued tracker updates: a spot
instance's notice has better uses; its trial's run resumes with the worker that continues it."""


class TrialTracking:
    """Sends a worker's trials to the study's trackers, off the training thread."""

    def __init__(self, study: StudyRef, *, worker_id: str, device: str) -> None:
        self.study = study
        self._worker = {"worker_id": worker_id, "device": device}
        self._senders = [
            Sender(
                tracker,
                export_hint=f"`hpsearch export --study {study.name} --to {tracker.name}` "
                "writes the study's trials there later",
            )
            for tracker in open_trackers(study, quick_fail=True)
        ]
        self._last_epoch: dict[int, int] = {}
        self._recorded: dict[int, set[int]] = {}

    def trial_started(self, run: TrialRun) -> None:
        if not self._senders:
            return
        self._last_epoch[run.number] = max(run.reported, default=0)
        # A resumed trial may report again an epoch its checkpoint ends in: sent once.
        self._recorded[run.number] = set(run.reported)
        when, reported = time.time(), dict(run.reported)

        def started() -> TrialStarted:  # on the sender thread: `git` runs there, not here
            # Not provenance.environment(): it looks at torch, which may be loading right now
            # on the training thread; the trial's end brings every tag.
            attrs = {"hostname": socket.gethostname(), **code_version(), **self._worker}
            return TrialStarted(
                study_uid=self.study.uid,
                study_name=self.study.name,
                number=run.number,
                params=dict(run.params),
                metric=self.study.config.study.metric,
                reported=reported,
                tags=provenance_tags(attrs) | {"hpsearch.device": self._worker["device"]},
                started_at=when,
            )

        self._submit(f"trial {run.number} start", lambda t: t.start_trial(started()))

    def reporting(
        self, number: int, report: Callable[[int, float], bool]
    ) -> Callable[[int, float], bool]:
        """`report`, also sending each epoch's value to the trackers."""
        if not self._senders:
            return report

        def tracked(epoch: int, value: float) -> bool:
            self._last_epoch[number] = epoch
            if epoch not in self._recorded.get(number, ()):
                at = time.time()
                for sender in self._senders:
                    sender.submit_epoch(number, epoch, value, at)
            return report(epoch, value)

        return tracked

    def trial_ended(self, run: TrialRun, outcome: TrialOutcome, *, paused: bool = False) -> None:
        """The trial's end as recorded, or its hand-back (preempted, paused at a rung of
        promotion-based ASHA, attempt failed): its run stays open for whoever resumes it."""
        if not self._senders:
            return
        last = self._last_epoch.pop(run.number, 0)
        self._recorded.pop(run.number, None)
        if paused or outcome.status not in ("completed", "pruned", "diverged", "failed"):
            why = "paused" if paused else outcome.status.replace("_", " ")
            self._submit(f"trial {run.number} hand-back", lambda t: t.hand_back(run.number, why))
            return
        end = trial_end(outcome, run.reported)
        state = {"COMPLETE": "complete", "PRUNED": "pruned"}.get(end.state, "failed")
        ended = TrialEnded(
            number=run.number,
            state=state,  # type: ignore[arg-type]
            value=end.value,
            pruned_at=(last or max(run.reported, default=0)) if state == "pruned" else None,
            reason=end.fail_reason,
            tags=provenance_tags({**outcome.user_attrs, **self._worker}),
        )
        self._submit(f"trial {run.number} end", lambda t: t.end_trial(ended))

    def ended_by_study_end(self, numbers: list[int]) -> None:
        """Trials left paused (or handed back) when the study ended: PRUNED with their last
        value, by the study's end rather than by a worker; their open runs are ended so."""
        for number in numbers:
            started = TrialStarted(
                study_uid=self.study.uid,
                study_name=self.study.name,
                number=number,
                params={},
                metric=self.study.config.study.metric,
                running=False,
            )
            ended = TrialEnded(number=number, state="pruned", value=None, reason=None)
            self._submit(f"trial {number} start", lambda t, s=started: t.start_trial(s))
            self._submit(f"trial {number} end", lambda t, e=ended: t.end_trial(e))

    def close(self, *, study_done: bool, hurry: bool = False) -> None:
        """Send what is queued, the study's end if it is done, and stop: waits while updates
        go out, at most FLUSH_S without one getting through (`hurry`, on SIGTERM or Ctrl-C:
        HURRY_S in all)."""
        if study_done:
            self._submit("study end", lambda t: t.end_study())
        for sender in self._senders:
            if hurry:
                sender.close(min(FLUSH_S, HURRY_S), max_s=HURRY_S)
            else:
                sender.close(FLUSH_S)

    def _submit(self, what: str, call: Callable[[Any], None]) -> None:
        for sender in self._senders:
            sender.submit(what, functools.partial(call, sender.tracker))
