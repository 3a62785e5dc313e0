"""Nothing left behind: the checkpoints of trials that can no longer run are deleted; kept are
the best complete trial's (its final weights: `hpsearch best --weights`) and those of the trials
the study's end found paused at a rung or queued (cut by the budget in the middle of a rung): a
raised budget promotes or resumes them (`search.db.reopen`); `hpsearch delete` removes them with
the study.

A finished trial's checkpoint is deleted when it ends unless it is the best complete trial
then; each time a trial finishes, and when the study ends (the trials still paused at a rung
end PRUNED: no worker will resume them), `sweep` deletes the checkpoints of every finished
trial but the best. Two workers finishing at once may both keep theirs for a moment; the
listing is read before the best, so a sweep never deletes the checkpoint of a trial it did not
see finish, and the next sweep removes the one that lost.

What it needs: the study's artifact store (the worker's), and the trial rows. With
``--keep-checkpoints`` none of this runs: every trial keeps its last checkpoint.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from search.db.checkpoint_pointers import POINTER_ATTR, drop_pointer
from search.db.leases import Claim, fence
from search.db.reopen import ENDED_BY_ATTR
from search.db.statements import upsert_attributes
from search.db.status import best_trial
from search.db.storage import Storage
from search.db.tables import trial_system_attributes, trial_user_attributes, trials
from search.study.studies import StudyRef

__all__ = ["Sweep", "after_finish", "describe", "record_provenance", "sweep"]

logger = logging.getLogger("search.worker.leftovers")


@dataclass
class Sweep:
    """What a sweep did: trials whose checkpoints it deleted, the best trial's kept."""

    deleted: list[int] = field(default_factory=list)
    kept_best: int | None = None
    kept_paused: int = 0
    """Trials the study's end found paused at a rung (or cut by the budget), whose checkpoints
    stay for more budget."""


def after_finish(storage: Storage, checkpoints: Any, study: StudyRef) -> Sweep:
    """A trial just finished: delete its checkpoint unless it is the best complete trial now,
    then `sweep` what others left."""
    best = best_trial(storage, study.study_id, study.config.study.direction)
    if best is None or best[0] != checkpoints.claim.number:
        checkpoints.discard()
    return sweep(storage, checkpoints.store, study)


def sweep(storage: Storage, store: Any, study: StudyRef) -> Sweep:
    """Delete the checkpoints of every finished trial of the study but the best complete one."""
    t, a = trials, trial_system_attributes
    # Paused at a rung, or queued (cut by the budget mid-rung): a raised budget reopens them.
    paused_at_end = sa.select(a.c.trial_id).where(
        a.c.key == ENDED_BY_ATTR, a.c.value_json.in_(['"budget"', '"n_trials"'])
    )
    with storage.autocommit() as conn:
        # First the listing, then the best (see the module's docstring).
        listed = conn.execute(
            sa.select(t.c.trial_id, t.c.number, t.c.trial_id.in_(paused_at_end).label("paused"))
            .join(a, a.c.trial_id == t.c.trial_id)
            .where(
                t.c.study_id == study.study_id,
                t.c.state.in_(["COMPLETE", "PRUNED", "FAIL"]),
                a.c.key == POINTER_ATTR,
            )
        ).all()
    best = best_trial(storage, study.study_id, study.config.study.direction)
    done = Sweep(kept_best=None if best is None else best[0])
    done.kept_paused = sum(bool(row.paused) for row in listed)
    listed = [row for row in listed if not row.paused]
    for trial_id, number, _ in listed:
        if best is not None and number == best[0]:
            continue
        drop_pointer(storage, trial_id)
        remove_prefix = getattr(store, "remove_prefix", None)
        if remove_prefix is not None:
            with contextlib.suppress(Exception):  # space, not correctness: the next sweep
                remove_prefix(f"{study.uid}-{number}-")
                remove_prefix(f"ckpt-{study.uid}-{number}-")
        done.deleted.append(number)
    if done.kept_best is not None and not any(row.number == done.kept_best for row in listed):
        done.kept_best = None  # the best trial's checkpoint was not kept (an older study)
    return done


def record_provenance(storage: Storage, claim: Claim, attrs: dict[str, Any]) -> None:
    """Write a trial's provenance (host, worker, epochs trained, resumed_from ...) while this
    worker still holds it (fenced), in place of what an earlier run of it wrote: for a trial
    that pauses at a rung or is handed back, which may end later without this worker (a study
    that ends on its budget ends them PRUNED), and for a resumed trial that ends here (keys only
    the earlier run had, e.g. `data_parallel`, would otherwise describe this run)."""
    a = trial_user_attributes
    with storage.transaction() as conn:
        fence(conn, claim)
        conn.execute(
            sa.delete(a).where(a.c.trial_id == claim.trial_id, a.c.key.not_in(list(attrs)))
        )
        upsert_attributes(conn, a, claim.trial_id, attrs)


def describe(done: Sweep) -> str:
    """What a sweep did, in a line for the log."""
    said = [f"checkpoints of {len(done.deleted)} ended trial(s) deleted"]
    if done.kept_best is not None:
        said.append(f"the best trial's ({done.kept_best}) kept for `hpsearch best --weights`")
    if done.kept_paused:
        said.append(
            f"{done.kept_paused} paused or cut trial(s)' kept: a raised budget goes on with them"
        )
    return "; ".join(said) + " (`hpsearch delete` removes them with the study)"
