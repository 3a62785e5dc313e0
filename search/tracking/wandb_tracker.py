"""Weights & Biases: each trial one run, the runs of a study one group.

A trial's run id is derived from the study uid and the trial number (``<uid>-<number>``), and
runs are opened with ``resume="allow"``: whichever worker trains the trial, on whichever
machine, and `hpsearch export` later, continue the same run. Offline (``mode = "offline"``, or
WANDB_MODE=offline where the worker runs), each worker writes its runs under $WANDB_DIR and
`wandb sync` uploads them into the same runs.

What appears: the trial's params in the run's config (and the provenance under
``config.hpsearch``: host, device, precision, git commit, data fingerprint, versions), the
study's metric at every epoch (step = epoch, with an ``epoch`` column), the state in the
summary (``state``, ``pruned_at_epoch``, ``fail_reason``) and as a tag (complete, pruned,
failed), failed runs ending with exit code 1. A trial handed back (preempted, paused) is marked
preempting and resumes in the same run.

Credentials: W&B's own WANDB_API_KEY or ~/.netrc (`wandb login`), never the config.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import wandb

from search.study.settings import WandbSettings
from search.study.studies import StudyRef
from search.tracking.base import Tracker, study_params
from search.tracking.records import TrialEnded, TrialStarted

__all__ = ["WandbTracker", "wandb_run_id"]


def wandb_run_id(study_uid: str, number: int) -> str:
    return f"{study_uid}-{number}"


class WandbTracker(Tracker):
    name = "wandb"

    def __init__(self, settings: WandbSettings, study: StudyRef) -> None:
        self.settings = settings
        self.study = study
        # wandb logs each run's set-up at INFO: not for the worker's log.
        logging.getLogger("wandb").setLevel(logging.WARNING)
        self.mode = os.environ.get("WANDB_MODE") or settings.mode
        path = "/".join(p for p in (settings.entity, settings.project) if p)
        self.where = f"project {path!r} ({self.mode})"
        self._metric = study.config.study.metric
        self._run: Any = None
        self._number: int | None = None
        self._about: dict[str, Any] = {}

    def start_trial(self, started: TrialStarted) -> None:
        self._finish_open_run()
        self._about = {
            "study": self.study.name,
            "study_uid": self.study.uid,
            "trial_number": started.number,
            "study_setup": study_params(self.study),
            **_untagged(started.tags),
        }
        run = wandb.init(
            project=self.settings.project,
            entity=self.settings.entity,
            id=wandb_run_id(self.study.uid, started.number),
            name=f"{self.study.name} trial {started.number}",
            group=self.study.name,
            job_type="trial",
            # Read at each run, not once per process as wandb's own settings are.
            dir=os.environ.get("WANDB_DIR") or None,
            config={**started.params, "hpsearch": self._about},
            allow_val_change=True,
            resume="allow",
            mode=self.mode,
            reinit="create_new",
            settings=wandb.Settings(
                console="off", x_disable_stats=True, silent=True, save_code=False
            ),
        )
        self._run, self._number = run, started.number
        if started.running:
            run.summary["state"] = "running"
        # Values the run lacks (a resumed trial's earlier epochs, an export): W&B keeps steps
        # in order, and drops those below the run's current step. Offline, a worker's earlier
        # epochs are in the previous worker's run files already (`wandb sync` joins them).
        backfill = started.reported if not (self.mode == "offline" and started.live) else {}
        for epoch, value in sorted(backfill.items()):
            if int(epoch) >= run.step:
                run.log({self._metric: float(value), "epoch": int(epoch)}, step=int(epoch))

    def log_epochs(self, number: int, points: list[tuple[int, float, float]]) -> None:
        run = self._open(number)
        for epoch, value, _at in points:
            if epoch >= run.step:
                run.log({self._metric: float(value), "epoch": epoch}, step=epoch)

    def end_trial(self, ended: TrialEnded) -> None:
        run = self._open(ended.number)
        about = {**self._about, **_untagged(ended.tags)}
        run.config.update({"hpsearch": about}, allow_val_change=True)
        run.summary["state"] = ended.state
        if ended.value is not None:
            run.summary["value"] = ended.value
        pruned_at = ended.pruned_at
        if ended.state == "pruned" and pruned_at is None:  # ended by the study's end
            pruned_at = run.summary.get("epoch")
        if pruned_at is not None:
            run.summary["pruned_at_epoch"] = pruned_at
        if ended.reason:
            run.summary["fail_reason"] = ended.reason
        run.tags = (*[t for t in run.tags if t not in ("running", "handed back")], ended.state)
        self._run = self._number = None
        run.finish(exit_code=1 if ended.state == "failed" else 0)

    def hand_back(self, number: int, why: str) -> None:
        if self._number != number:
            return
        run = self._run
        run.summary["state"] = f"handed back ({why})"
        run.mark_preempting()
        self._run = self._number = None
        run.finish()

    def end_study(self) -> None:
        """A W&B group has no state of its own: its runs' states say it all."""

    def close(self) -> None:
        self._finish_open_run()

    def is_transient(self, exc: BaseException) -> bool:
        return isinstance(exc, (wandb.errors.CommError, ConnectionError, TimeoutError))

    def _open(self, number: int) -> Any:
        if self._number != number or self._run is None:
            raise LookupError(f"trial {number} has no open W&B run (its start was not recorded)")
        return self._run

    def _finish_open_run(self) -> None:
        if self._run is not None:  # a trial that stopped here without an end (taken over)
            run, self._run, self._number = self._run, None, None
            run.finish()


def _untagged(tags: dict[str, str]) -> dict[str, str]:
    """``hpsearch.hostname`` -> ``hostname``: under config.hpsearch already."""
    return {k.removeprefix("hpsearch."): v for k, v in tags.items()}
