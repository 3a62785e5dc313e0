"""The decisions on each report of a trial: the pruner, the study's budget, promotion.

`StudyRules` is what decides on a study's trials, as one worker applies it: the epochs where the
pruner may stop a trial (`PruningPoints`), the epoch and hour budgets (`StudyLimits`) and
promotion-based ASHA (`Promoter`, both `search.worker.budget_and_promotion`). `TrialReporter`
is one trial's report callback: each value goes to the background writer
(`search.worker.report_writer`); at an epoch where the pruner can decide, it is asked; with a
budget, every new epoch uses the epoch reserved for it and reserves the next; at a rung of
promotion-based ASHA the trial goes on if it ranks in the top 1/eta there. When it says stop,
`stopped` says why (`search.worker.trial`'s `StopReason`), and `ended_by(outcome)` is how the
trial ended, for its record.

    reporter = TrialReporter(claim, reported, rules=rules, writer=writer, health=health,
                             held=held, show=progress.show)
    reporter(3, 0.91)   # -> True: stop (reporter.stopped says why)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from search.db.leases import Claim, LeaseLost
from search.db.storage import Storage, is_transient
from search.pruning.pruner import Pruner
from search.pruning.pruners import rung_steps
from search.study.extend import reread_budgets
from search.study.settings import PrunerSettings
from search.study.studies import StudyRef
from search.worker.budget_and_promotion import Promoter, StudyLimits
from search.worker.health import DatabaseHealth, HeldTrial
from search.worker.report_writer import ReportWriter
from search.worker.trial import (
    BudgetSpent,
    Finished,
    Interrupted,
    Lost,
    Paused,
    Pruned,
    StopReason,
    TrialOutcome,
)

__all__ = ["PRUNING_REFRESH_S", "PruningPoints", "StudyRules", "TrialReporter"]

PRUNING_REFRESH_S = 1.0
"""Longest a running trial's view of the other trials' rung values may lag (it is refreshed in
the background after each decision, and at least this often)."""


@dataclass(frozen=True)
class PruningPoints:
    """The epochs at which the pruner may stop a trial: every epoch (`every`, the median
    pruner), the rungs of successive halving and Hyperband, or none (no pruner; promotion-based
    ASHA pauses instead)."""

    epochs: int
    rungs: tuple[int, ...] = ()
    every: bool = False

    @classmethod
    def of(cls, pruner: PrunerSettings, epochs: int) -> PruningPoints:
        steps = rung_steps(pruner, epochs)
        return cls(epochs, every=True) if steps is None else cls(epochs, tuple(steps))

    @property
    def prunes(self) -> bool:
        """Whether a pruner decides at all."""
        return self.every or bool(self.rungs)

    def between(self, after: int, epoch: int) -> bool:
        """Whether the pruner may decide at an epoch in (after, epoch]."""
        return self.every or any(after < s <= epoch for s in self.rungs)

    def next_after(self, epoch: int) -> int:
        """The first epoch after `epoch` where the pruner may decide (the last epoch if none)."""
        if self.every:
            return epoch + 1
        return min([s for s in self.rungs if s > epoch] or [self.epochs])


class StudyRules:
    """The pruner, the budget and promotion of one study, as one worker applies them."""

    def __init__(self, storage: Storage, study: StudyRef) -> None:
        config = study.config
        self.storage, self.study, self.epochs = storage, study, config.task.epochs
        self.points = PruningPoints.of(config.pruner, self.epochs)
        # Budgets and promotion-based ASHA (budget_and_promotion.py); None: not configured.
        self.limits = StudyLimits(storage, study) if config.study.has_budget else None
        self.promoter = Promoter(storage, study) if config.pruner.pauses else None
        self._pruner: Pruner | None = None
        if self.limits is not None:
            self.limits.reread = self.more_budget
        self._followers: list[Callable[[StudyRef], None]] = []

    def more_budget(self) -> bool:
        """Read the study's stored budgets again (`hpsearch extend`, or a raised config run
        again, while this worker runs); True if they changed: this worker spends the new ones
        (`self.study`, the limits, and whoever follows: the claimer, the sampler)."""
        fresh = reread_budgets(self.storage, self.study)
        if fresh is None:
            return False
        self.study = fresh
        if self.limits is not None:
            self.limits.adopt(fresh)
        for follow in self._followers:
            follow(fresh)
        return True

    def follow(self, adopt: Callable[[StudyRef], None]) -> None:
        """`adopt(study)` is called with the study whenever `more_budget` finds new budgets."""
        self._followers.append(adopt)

    @property
    def limited(self) -> bool:
        """A budget or promotion: each new epoch and each rung is decided on, and the study
        may end before n_trials."""
        return self.limits is not None or self.promoter is not None

    def first_chunk(self) -> int:
        """Epochs reserved with a claim: a new trial's first, up to its first decision (any
        reserved beyond what the trial needs goes back when it stops)."""
        if self.promoter is not None:
            return self.study.config.pruner.min_resource
        return self.points.next_after(0)

    def epochs_to_next_decision(self, number: int, epoch: int) -> int:
        """Epochs from `epoch` to the next one where trial `number` may stop (a rung; the end):
        reserved at once from the budget."""
        if self.promoter is not None:
            bracket = self.promoter.bracket(number)
            return self.promoter.rungs.next_level(bracket, epoch) - epoch
        return self.points.next_after(epoch) - epoch

    def pruner(self) -> Pruner:
        """The study's pruner, loaded once (only where `points.prunes`)."""
        if self._pruner is None:
            self._pruner = Pruner(self.storage, self.study, refresh_s=PRUNING_REFRESH_S)
        return self._pruner

    def prepare(self, health: DatabaseHealth) -> None:
        """Load what every trial needs (the budget's counter, the study for pruning) before the
        first claim, so that start-up cost is not paid inside a trial."""
        limits = self.limits
        if limits is not None:
            health.retry(limits.prepare, "prepare the budget")
        if self.points.prunes:
            health.retry(lambda: self.pruner().view.refresh(), "load")

    def begin_trial(self, claim: Claim, health: DatabaseHealth, *, resumed: bool) -> None:
        if self.points.prunes:
            health.retry(
                lambda: self.pruner().begin_trial(claim.trial_id, claim.number, resumed=resumed),
                "read",
            )

    def give_back_epoch(self, health: DatabaseHealth) -> None:
        """An epoch reserved and not trained goes back while the trial still runs: no worker
        takes the study's budget for spent before it is."""
        limits = self.limits
        if limits is not None and limits.holds_epoch:
            health.retry(limits.give_back, "return an epoch", attempts=5)

    def end_trial(self) -> None:
        if self._pruner is not None:
            self._pruner.end_trial()

    def close(self) -> None:
        if self._pruner is not None:
            self._pruner.close()


class TrialReporter:
    """One trial's report(epoch, value) -> stop; `stopped`: why it said stop."""

    def __init__(
        self,
        claim: Claim,
        reported: Mapping[int, float],
        *,
        rules: StudyRules,
        writer: ReportWriter,
        health: DatabaseHealth,
        held: HeldTrial,
        show: Callable[[int, int, float], None],
    ) -> None:
        self.claim, self.rules, self.writer, self.health, self.held = (
            claim,
            rules,
            writer,
            health,
            held,
        )
        self._show = show
        self.values = dict(reported)
        """Every value of the trial, those it had when it was claimed and those reported since."""
        self._asked_at = max(reported, default=0)  # the pruner's last decision
        self._high = max(reported, default=0)  # a resumed trial re-reports epochs up to here
        self.stopped: StopReason | None = None

    def __call__(self, epoch: int, value: float) -> bool:
        stop = self._prune(epoch, value)
        if self.rules.limited and epoch > self._high:
            self._high = epoch
            stop = self._limit(epoch, value, stop)
        elif stop:
            self.stopped = Lost() if self.held.lost else Pruned(epoch)
        return stop

    def ended_by(self, outcome: TrialOutcome) -> StopReason:
        """How the trial ended, given what its function returned."""
        if self.held.lost:
            return Lost()
        if outcome.status == "preempted":
            return Interrupted(fenced=self.held.fenced)
        if outcome.status != "pruned":
            return Finished()
        return self.stopped or Pruned(max(self.values, default=0))

    def _prune(self, epoch: int, value: float) -> bool:
        """The value goes to the writer; at an epoch where the pruner can decide, it is asked."""
        if self.held.lost:
            return True
        self._show(self.claim.number, epoch, value)
        self.writer.add(epoch, value)
        self.values[epoch] = value
        # After the last epoch there is nothing left to save: the trial completes.
        if epoch >= self.rules.epochs or not self.rules.points.between(self._asked_at, epoch):
            return False
        try:
            # The values need not be stored first: pruners compare the other trials' rung
            # attributes with this trial's values, which the pruner is handed here.
            decision = self.rules.pruner().should_prune(self.claim.trial_id, self.values)
            self.health.back()
        except LeaseLost:
            self.held.lost = True
            return True
        except Exception as exc:
            if not is_transient(exc):
                raise
            # Keep training: the values are written when the database is back, and the
            # pruner is asked at the next rung.
            self.health.down(exc, "report")
            return False
        self._asked_at = epoch
        return decision

    def _limit(self, epoch: int, value: float, stop: bool) -> bool:
        """A new epoch of a study with a budget or promotion: it used the epoch reserved for
        it; at a rung the trial goes on only if promotable; the next epoch is reserved."""
        limits, promoter, claim = self.rules.limits, self.rules.promoter, self.claim
        if limits is not None:
            limits.trained()
        if stop:
            self.stopped = Lost() if self.held.lost else Pruned(epoch)
            return True
        if epoch >= self.rules.epochs:
            return False
        if promoter is not None and promoter.at_rung(claim.number, epoch):
            try:
                # Both ask the database (the rung schedule, the rivals at the rung).
                goes_on = not promoter.pauses_at(claim, epoch) or promoter.goes_on(
                    claim, epoch, value
                )
                self.health.back()
            except Exception as exc:
                if not is_transient(exc):
                    raise
                self.health.down(exc, "report")
                goes_on = True  # no decision without the database: train on
            if not goes_on:
                self.stopped = Paused(epoch, value)
                return True
        if limits is not None:
            ahead = self.rules.epochs_to_next_decision(claim.number, epoch)
            if not self.health.retry(lambda: limits.reserve(ahead), "reserve an epoch"):
                self.stopped = BudgetSpent(epoch)
                return True
        return False
