"""A worker's side of budgets and promotion-based ASHA: what it asks the database, and when.

`StudyLimits` (a study with `budget_epochs` or `budget_hours`): the worker reserves epochs of
the budget before training them (`search.db.budget`): with a claim, a new trial's epochs up to
its first rung; at a rung it passes, those up to the next one; one statement each. Epochs it
reserved and did not train are given back before the trial's end is written, so that no other
worker takes the study for over while they are still to be spent. The hours are checked at
every claim and report.

`Promoter` (`[pruner] type = "asha"`, or hyperband with `promotion = true`): at a rung, a trial
that ranks in the top 1/eta of the trials recorded there goes on at once (the promotion a free
worker would make anyway); otherwise it pauses (`search.db.pauses`). Before starting a new trial,
a free worker resumes the best promotable paused trial. The rule is `search.pruning.promotion`'s;
the database evaluates it (one query per decision, whatever the study's size), and a test
checks both pick the same trial. When no new
trial may start (n_trials reached), paused trials are promoted with the looser rule ceil(n/eta)
(draining), and whatever then stays paused ends PRUNED with its last value once nothing runs.
ASHA (one bracket) stops pausing at a rung whose ranking the next rung contradicts
(`search.pruning.adaptive`): a worker reads the rung table once per trial at its first rung
until that decision is settled.

`publish_progress`: the budget used and left, and the paused trials, as the study's user
attributes ``budget`` and ``paused trials``, which optuna-dashboard shows on the study's page
("Study User Attributes"); each worker writes them after its trials (at most every
`PUBLISH_EVERY_S`) and when it leaves.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from typing import Any

from search.db import budget, pauses
from search.db.enqueued import HEDGE_ATTR, trial_attr
from search.db.leases import Claim
from search.db.statements import upsert_attributes
from search.db.storage import Storage
from search.db.studies import lock_study
from search.db.tables import study_user_attributes
from search.pruning.adaptive import RungSchedule
from search.pruning.promotion import Rungs
from search.sampling.hedge import study_hedge_level
from search.study.note import progress_line, refresh_progress_line
from search.study.spending import budget_line, budget_spent, hours_since
from search.study.studies import StudyRef

__all__ = [
    "BUDGET_ATTR",
    "PAUSED_ATTR",
    "PUBLISH_EVERY_S",
    "Promoter",
    "StudyLimits",
    "publish_progress",
]

logger = logging.getLogger("search.worker.budget_and_promotion")

CLAIM_RACES = 5
"""Promotable trials a worker tries before giving up for this look (others resumed them)."""

BUDGET_ATTR = "budget"
"""The study's user attribute: '340/5000 epochs (4660 left), 0.52/12 h (11.48 left)'."""
PAUSED_ATTR = "paused trials"
"""The study's user attribute: how many trials sit paused at a rung (pausing pruners)."""
PUBLISH_EVERY_S = 5.0
"""A worker writes them at most this often (and when it leaves): the dashboard polls slower."""


def publish_progress(storage: Storage, study: StudyRef) -> None:
    """Write the budget used and left, and the paused trials, as the study's user attributes,
    read fresh from the database (the epoch counter every worker counts in). Writers take
    turns (`lock_study`), so what stays written is what was read last."""
    settings = study.config.study
    pausing = study.config.pruner.pauses
    sid = study.study_id
    with storage.transaction() as conn:
        lock_study(conn, sid)
        used = budget.epochs_used(None, sid, conn) if settings.budget_epochs is not None else None
        start = budget.first_start(None, sid, conn) if settings.budget_hours is not None else None
        attrs: dict[str, Any] = {}
        spent = budget_spent(settings, used, start)
        if spent is not None:
            attrs[BUDGET_ATTR] = budget_line(spent)
        if pausing:
            attrs[PAUSED_ATTR] = pauses.paused_count(conn, sid)
        upsert_attributes(conn, study_user_attributes, sid, attrs)
        if attrs:  # and at the top of the study's note, where the dashboard shows it first
            refresh_progress_line(
                conn, sid, progress_line(attrs.get(BUDGET_ATTR), attrs.get(PAUSED_ATTR))
            )


class StudyLimits:
    """The study's epoch and hour budgets, as one worker spends them."""

    def __init__(self, storage: Storage, study: StudyRef) -> None:
        self.storage, self.study = storage, study
        settings = study.config.study
        self.budget_epochs = settings.budget_epochs
        self.budget_hours = settings.budget_hours
        self._start: datetime.datetime | None = None
        self.held = 0
        """Epochs this worker reserved and has not trained yet."""
        self._used: int | None = None
        """The study's epochs used when this worker last reserved some (None: not yet)."""
        self.reread: Callable[[], bool] = lambda: False
        """Read the study's stored budgets again; True if they changed (`StudyRules.more_budget`:
        `hpsearch extend` while this worker runs). Asked only when a budget looks spent."""

    def adopt(self, study: StudyRef) -> None:
        """The study's budgets changed while this worker runs: spend the new ones."""
        self.study = study
        self.budget_epochs = study.config.study.budget_epochs
        self.budget_hours = study.config.study.budget_hours

    def prepare(self) -> None:
        if self.budget_epochs is not None:
            budget.ensure_counter(self.storage, self.study.study_id)

    @property
    def holds_epoch(self) -> bool:
        return self.held > 0

    def reserve(self, wanted: int = 1) -> bool:
        """Make sure the next epoch is reserved (and check the hours), reserving up to
        `wanted` at once; False: the study's budget is spent, train no more."""
        if self.hours_spent():
            return False
        if self.held > 0:
            return True
        if self.budget_epochs is None:
            self.held = 1
            return True
        got = budget.reserve(self.storage, self.study.study_id, self.budget_epochs, max(1, wanted))
        self.held = got.epochs
        if got.used is not None:
            self._used = got.used
        if self.held == 0 and self.reread():  # refused: unless the budget was raised meanwhile
            return self.reserve(wanted)
        return self.held > 0

    def too_little_for(self, epochs: int) -> bool:
        """Whether the epoch budget left is less than `epochs` (one full training: a trial
        started now could not finish), as this worker last read it: when it reserved epochs,
        its own reserved and untrained ones counted as left. False without an epoch budget."""
        if self.budget_epochs is None or self._used is None:
            return False
        return self.budget_epochs - self._used + self.held < epochs

    def trained(self) -> None:
        """One reserved epoch was trained (reported)."""
        self.held = max(0, self.held - 1)

    def give_back(self) -> None:
        """Return the reserved epochs not trained."""
        if self.held > 0 and self.budget_epochs is not None:
            budget.return_epoch(self.storage, self.study.study_id, self.held)
        self.held = 0

    def hours_spent(self) -> bool:
        if self.budget_hours is None:
            return False
        if self._start is None:
            self._start = budget.first_start(self.storage, self.study.study_id)
            if self._start is None:
                return False  # no trial has started: the clock has not either
        if hours_since(self._start) < self.budget_hours:
            return False
        if not self.reread():  # unless the budget was raised meanwhile
            return True
        return self.budget_hours is not None and hours_since(self._start) >= self.budget_hours

    def spent(self) -> bool:
        """Whether the study's budget is spent (read after the running trials were counted:
        a running trial gives its unused epoch back before it ends)."""
        if self.hours_spent():
            return True
        if self.budget_epochs is None:
            return False
        used = budget.epochs_used(self.storage, self.study.study_id)
        if used < self.budget_epochs:
            return False
        if not self.reread():  # unless the budget was raised meanwhile
            return True
        return self.budget_epochs is not None and used >= self.budget_epochs


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
        # ASHA retires a rung that ranks trials unlike the next one (search.pruning.adaptive).
        self.schedule = (
            RungSchedule(self.rungs.levels(0), maximize=self.maximize) if brackets == 1 else None
        )
        self._scheduled_for: int | None = None
        # Hedged trials (drawn at random) first pause at a higher rung (search.sampling.hedge).
        self.hedge_level = study_hedge_level(config)
        self._hedge_of: tuple[int, int | None] | None = None  # (trial id, its hedge level)

    def bracket(self, number: int) -> int:
        return self.rungs.bracket_of(number, self.seed)

    def at_rung(self, number: int, epoch: int) -> bool:
        """Whether `epoch` ends a rung of trial `number`'s bracket (no database query)."""
        return self.rungs.pauses_at(self.bracket(number), epoch)

    def pauses_at(self, claim: Claim, epoch: int) -> bool:
        """Whether the claimed trial stops at `epoch` unless promotable: a rung of its bracket
        that the rung schedule has not retired, not below a hedge's first rung (may ask the
        database)."""
        number = claim.number
        if not self.at_rung(number, epoch):
            return False
        if self.hedge_level is not None and epoch < self.hedge_level:
            hedged = self.hedged_at(claim.trial_id)
            if hedged is not None and epoch < hedged:
                return False
        schedule = self.schedule
        if schedule is None:
            return True
        if not schedule.settled and self._scheduled_for != number:
            # Once per trial at its first rung, until the schedule is settled.
            rows = pauses.rung_rows(self.storage, self.study.study_id)
            schedule.update((r.trial_id, r.level, r.value) for r in rows)
            self._scheduled_for = number
        return schedule.pauses_at(epoch)

    def hedged_at(self, trial_id: int) -> int | None:
        """The epoch a hedged trial is first judged at (its `HEDGE_ATTR`, set where it was
        sampled), or None if it is no hedge; read once per trial."""
        if self._hedge_of is None or self._hedge_of[0] != trial_id:
            level = trial_attr(self.storage, trial_id, HEDGE_ATTR)
            self._hedge_of = (trial_id, None if level is None else int(level))
        return self._hedge_of[1]

    def goes_on(self, claim: Claim, epoch: int, value: float) -> bool:
        """At a rung: True if the trial ranks in the top 1/eta there (recorded, and it goes
        on); False: it pauses."""
        return pauses.pass_rung_if_promotable(
            self.storage,
            claim,
            self.bracket(claim.number),
            epoch,
            value,
            maximize=self.maximize,
            eta=self.eta,
        )

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

    def resume_next(
        self, worker_id: str, *, draining: bool = False, why: str = "no new trial may start"
    ) -> Claim | None:
        """Claim the best promotable paused trial, or None if there is none; `draining` (by
        the looser rule) says `why` in the log."""
        for _ in range(CLAIM_RACES):
            best = self._best_paused(draining)
            if best is None:
                return None
            claim = pauses.claim_paused(
                self.storage, self.study.study_id, worker_id, best.trial_id, best.level
            )
            if claim is not None:
                rule = (
                    f"in the top ceil(n/{self.eta}) there, the draining rule: {why}"
                    if draining
                    else f"in the top 1/{self.eta} there"
                )
                logger.info(
                    "trial %d: promoted from rung %d (value %.4g, %s)",
                    claim.number,
                    best.level,
                    best.value,
                    rule,
                )
                return claim
        return None

    def can_resume(self, *, draining: bool = False) -> bool:
        """Whether some paused trial is promotable now."""
        return self._best_paused(draining) is not None

    def _best_paused(self, draining: bool) -> pauses.RungRow | None:
        return pauses.next_promotable(
            self.storage,
            self.study.study_id,
            maximize=self.maximize,
            eta=self.eta,
            draining=draining,
        )
