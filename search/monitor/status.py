"""`hpsearch status`: trials by state, the best trial, and who runs what (`StudyStatus`), read in
a few queries (`search.db.status`)."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any

from search.db.status import read_status
from search.db.storage import Storage
from search.db.trial_changes import param_value
from search.db.trial_table import leading_paused
from search.study.spending import budget_line, budget_spent
from search.study.studies import StudyRef

__all__ = [
    "BestTrial",
    "PausedTrial",
    "RunningTrial",
    "StudyStatus",
    "format_best",
    "format_budget",
    "format_leading_paused",
    "format_status",
    "study_status",
]


@dataclass(frozen=True)
class BestTrial:
    """The best complete trial so far."""

    number: int
    value: float
    params: dict[str, Any]


@dataclass(frozen=True)
class PausedTrial:
    """The paused trial leading the search (ASHA): the best value at the highest rung."""

    number: int
    value: float
    rung: int


@dataclass(frozen=True)
class RunningTrial:
    """A RUNNING trial and who runs it (``worker_id`` None: being sampled)."""

    number: int
    worker_id: str | None
    hostname: str | None
    device: str | None
    epoch: int | None
    last_value: float | None
    seconds: float | None
    heartbeat_age_s: float | None


@dataclass(frozen=True)
class StudyStatus:
    """What `hpsearch status` shows; ``to_dict()`` is its ``--json`` object (README lists the
    keys)."""

    study: str
    direction: str
    metric: str
    n_trials: int | None
    """None: the study ends on a budget alone."""
    complete: int
    pruned: int
    failed: int
    running: int
    waiting: int
    """Queued trials, not counting paused ones."""
    paused: int
    """Trials paused at a rung (asha), waiting for promotion."""
    budget: dict[str, dict[str, float]] | None
    """{"epochs": {budget, used, left}, "hours": {budget, used, left}} for the budgets the
    study has; None when it has none."""
    best: BestTrial | None
    live_workers: int
    running_trials: list[RunningTrial]
    leading_paused: PausedTrial | None = None
    """Under ASHA, the paused trial with the best value at the highest rung: the search's
    leader before (and beside) any finished trial; None without paused trials."""

    @property
    def finished(self) -> int:
        """Trials that ended: complete, pruned or failed."""
        return self.complete + self.pruned + self.failed

    @property
    def finished_text(self) -> str:
        """'12/30 finished', or '12 finished' for a study without n_trials (a budget ends it)."""
        if self.n_trials:
            return f"{self.finished}/{self.n_trials} finished"
        return f"{self.finished} finished"

    @property
    def done(self) -> bool:
        """The study ended: nothing runs, waits or is paused, and n_trials or a budget is spent."""
        if self.running or self.waiting or self.paused:
            return False
        if self.n_trials and self.finished >= self.n_trials:
            return True
        return self.finished > 0 and any(b["left"] <= 0 for b in (self.budget or {}).values())

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def study_status(storage: Storage, study: StudyRef) -> StudyStatus:
    """The study's status, read in one read-only transaction."""
    config = study.config
    s = config.study
    rows = read_status(
        storage,
        study.study_id,
        s.direction,
        paused=config.pruner.pauses,
        epochs=s.budget_epochs is not None,
        hours=s.budget_hours is not None,
    )
    counts, best, running, live = rows.counts, rows.best, rows.running, rows.live_workers
    params = {name: param_value(value, dist) for name, value, dist in rows.best_params}
    return StudyStatus(
        study=study.name,
        direction=config.study.direction,
        metric=config.study.metric,
        n_trials=config.study.n_trials,
        complete=counts.get("COMPLETE", 0),
        pruned=counts.get("PRUNED", 0),
        failed=counts.get("FAIL", 0),
        running=counts.get("RUNNING", 0),
        waiting=counts.get("WAITING", 0) - rows.paused,
        paused=rows.paused,
        budget=budget_spent(s, rows.epochs_used, rows.first_start),
        best=None if best is None else BestTrial(best.number, float(best.value), params),
        leading_paused=_leading_paused(storage, study) if rows.paused else None,
        live_workers=live,
        running_trials=[
            RunningTrial(
                number=r.number,
                worker_id=r.worker_id,
                hostname=r.hostname,
                device=r.device,
                epoch=r.epoch,
                last_value=None if r.last_value is None else float(r.last_value),
                seconds=None if r.seconds is None else round(r.seconds, 1),
                heartbeat_age_s=None if r.heartbeat_age is None else round(r.heartbeat_age, 1),
            )
            for r in running
        ],
    )


def _leading_paused(storage: Storage, study: StudyRef) -> PausedTrial | None:
    found = leading_paused(storage, study.study_id, study.config.study.direction)
    return None if found is None else PausedTrial(*found)


def format_leading_paused(status: StudyStatus) -> str | None:
    """'  leading paused: trial 7  val_accuracy 0.986 at rung 9 (waits for promotion)'."""
    p = status.leading_paused
    if p is None:
        return None
    shown = f"{p.value:.6g}" if math.isfinite(p.value) else str(p.value)
    return (
        f"  leading paused: trial {p.number}  {status.metric} {shown} at rung {p.rung} "
        "(not finished: waits for promotion)"
    )


def format_budget(status: StudyStatus) -> str | None:
    """'  budget: 340/5000 epochs (4660 left), 0.52/12 h (11.48 left)', or None."""
    return "  budget: " + budget_line(status.budget) if status.budget else None


def format_status(status: StudyStatus) -> str:
    lines = [
        f"study {status.study}: {status.finished_text} ({status.metric}, {status.direction})",
        f"  complete {status.complete}  pruned {status.pruned}  failed {status.failed}  "
        f"running {status.running}  waiting {status.waiting}  "
        f"paused {status.paused}  live workers {status.live_workers}",
        format_best(status),
    ]
    budget = format_budget(status)
    if budget:
        lines.insert(2, budget)
    paused = format_leading_paused(status)
    if paused:
        lines.append(paused)
    if status.running_trials:
        lines.append("  running:")
        lines.append(f"    {'trial':>5}  {'epoch':>5}  {'for':>8}  worker")
        for r in status.running_trials:
            seconds = "-" if r.seconds is None else f"{r.seconds:.0f}s"
            where = f"{r.worker_id} ({r.device})" if r.worker_id else "(being sampled)"
            lines.append(f"    {r.number:>5}  {r.epoch:>5}  {seconds:>8}  {where}")
    return "\n".join(lines)


def format_best(status: StudyStatus) -> str:
    best = status.best
    if best is None:
        return "  best: none yet (no complete trial)"
    value = best.value
    shown = f"{value:.6g}" if math.isfinite(value) else str(value)
    return f"  best: trial {best.number}  {status.metric} {shown}  params {json.dumps(best.params)}"
