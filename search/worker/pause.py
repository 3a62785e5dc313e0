"""A worker's side of budgets and promotion-based ASHA: what it asks the database, and when.

`StudyLimits` (a study with `budget_epochs` or `budget_hours`): the worker reserves one epoch of
the budget when it claims a trial and the next one at every report that lets the trial go on
(`search.db.budget`); a reservation it does not use is given back before the trial's end is
written, so that no other worker takes the study for over while it is still to be spent.

`Promoter` (`[pruner] type = "asha"`, or hyperband with `promotion = true`): at a rung, a trial
that ranks in the top 1/eta of the trials recorded there goes on at once (the promotion a free
worker would make anyway); otherwise it pauses (`search.db.pauses`). Before starting a new trial,
a free worker resumes the best promotable paused trial (`search.pruning.promotion`). When no new
trial may start (n_trials reached), paused trials are promoted with the looser rule ceil(n/eta)
(draining), and whatever then stays paused ends PRUNED with its last value once nothing runs.
"""

from __future__ import annotations

import datetime
import logging
import math

from search.db import budget, pauses
from search.db.leases import Claim
from search.db.storage import Storage
from search.pruning.promotion import Paused, Rungs, RungTable
from search.study.studies import StudyRef

__all__ = ["Promoter", "StudyLimits"]

logger = logging.getLogger("search.worker.pause")

CLAIM_RACES = 5
"""Promotable trials a worker tries before giving up for this look (others resumed them)."""


class StudyLimits:
    """The study's epoch and hour budgets, as one worker spends them."""

    def __init__(self, storage: Storage, study: StudyRef) -> None:
        self.storage, self.study = storage, study
        settings = study.config.study
        self.budget_epochs = settings.budget_epochs
        self.budget_hours = settings.budget_hours
        self._start: datetime.datetime | None = None
        self.holds_epoch = False
        """This worker holds one reserved, not yet trained epoch."""

    def prepare(self) -> None:
        if self.budget_epochs is not None:
            budget.ensure_counter(self.storage, self.study.study_id)

    def reserve(self) -> bool:
        """Reserve the next epoch to train (and check the hours); False: the study's budget is
        spent, train no more."""
        if self.holds_epoch:
            return True
        if self.hours_spent():
            return False
        if self.budget_epochs is not None and not budget.reserve_epoch(
            self.storage, self.study.study_id, self.budget_epochs
        ):
            return False
        self.holds_epoch = True
        return True

    def trained(self) -> None:
        """The reserved epoch was trained (reported)."""
        self.holds_epoch = False

    def give_back(self) -> None:
        """Return the reserved epoch, not trained."""
        if self.holds_epoch and self.budget_epochs is not None:
            budget.return_epoch(self.storage, self.study.study_id)
        self.holds_epoch = False

    def hours_spent(self) -> bool:
        if self.budget_hours is None:
            return False
        if self._start is None:
            self._start = budget.first_start(self.storage, self.study.study_id)
            if self._start is None:
                return False  # no trial has started: the clock has not either
        now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
        return (now - self._start).total_seconds() >= self.budget_hours * 3600

    def spent(self) -> bool:
        """Whether the study's budget is spent (read after the running trials were counted:
        a running trial gives its unused epoch back before it ends)."""
        if self.hours_spent():
            return True
        return (
            self.budget_epochs is not None
            and budget.epochs_used(self.storage, self.study.study_id) >= self.budget_epochs
        )


class Promoter:
    """Pauses and promotions of one study (promotion-based ASHA, or Hyperband's brackets of it)."""

    def __init__(self, storage: Storage, study: StudyRef) -> None:
        self.storage, self.study = storage, study
        config = study.config
        p = config.pruner
        self.eta = p.reduction_factor
        rungs = Rungs(p.min_resource, p.reduction_factor, config.task.epochs)
        brackets = rungs.max_brackets() if p.type == "hyperband" else 1
        self.rungs = Rungs(p.min_resource, p.reduction_factor, config.task.epochs, brackets)
        self.seed = config.study.seed
        self.maximize = config.study.direction == "maximize"

    def bracket(self, number: int) -> int:
        return self.rungs.bracket_of(number, self.seed)

    def pauses_at(self, number: int, epoch: int) -> bool:
        return self.rungs.pauses_at(self.bracket(number), epoch)

    def goes_on(self, claim: Claim, epoch: int, value: float) -> bool:
        """At a rung: True if the trial ranks in the top 1/eta there (recorded, and it goes
        on); False: it pauses."""
        bracket = self.bracket(claim.number)
        table, _ = self.read()
        if not table.is_promotable(bracket, epoch, value, reduction_factor=self.eta, include=True):
            return False
        pauses.record_rung(self.storage, claim, bracket, epoch, value)
        return True

    def pause(
        self, claim: Claim, epoch: int, value: float, leftover: dict[int, float], worker_id: str
    ) -> None:
        pauses.pause(
            self.storage,
            claim,
            self.bracket(claim.number),
            epoch,
            value,
            leftover,
            {"hpsearch:handed_back_by": worker_id, "hpsearch:paused_at": epoch},
        )

    def resume_next(self, worker_id: str, *, draining: bool = False) -> Claim | None:
        """Claim the best promotable paused trial, or None if there is none."""
        for _ in range(CLAIM_RACES):
            table, paused = self.read()
            best = table.next_to_resume(paused, reduction_factor=self.eta, draining=draining)
            if best is None:
                return None
            claim = pauses.claim_paused(
                self.storage, self.study.study_id, worker_id, best.trial_id, best.level
            )
            if claim is not None:
                logger.info(
                    "trial %d: promoted from rung %d (value %.4g, top 1/%d of %d%s)",
                    claim.number,
                    best.level,
                    best.value,
                    self.eta,
                    table.recorded(best.bracket, best.level),
                    ", draining" if draining else "",
                )
                return claim
        return None

    def can_resume(self, *, draining: bool = False) -> bool:
        """Whether some paused trial is promotable now."""
        table, paused = self.read()
        return (
            table.next_to_resume(paused, reduction_factor=self.eta, draining=draining) is not None
        )

    def read(self) -> tuple[RungTable, list[Paused]]:
        table = RungTable(maximize=self.maximize)
        paused = []
        for row in pauses.rung_rows(self.storage, self.study.study_id):
            value = row.value if not math.isnan(row.value) else math.nan
            table.record(row.trial_id, row.bracket, row.level, value)
            if row.paused:
                paused.append(Paused(row.trial_id, row.bracket, row.level, value))
        return table, paused
