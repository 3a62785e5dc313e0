"""Nothing left behind: the checkpoints of trials that can no longer run are deleted, the best
complete trial's is kept (its final weights: `hpsearch best --weights`).

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
    with storage.autocommit() as conn:
        # First the listing, then the best (see the module's docstring).
        listed = conn.execute(
            sa.select(t.c.trial_id, t.c.number)
            .join(a, a.c.trial_id == t.c.trial_id)
            .where(
                t.c.study_id == study.study_id,
                t.c.state.in_(["COMPLETE", "PRUNED", "FAIL"]),
                a.c.key == POINTER_ATTR,
            )
        ).all()
    best = best_trial(storage, study.study_id, study.config.study.direction)
    done = Sweep(kept_best=None if best is None else best[0])
    for trial_id, number in listed:
        if best is not None and number == best[0]:
            continue
        drop_pointer(storage, trial_id)
        remove_prefix = getattr(store, "remove_prefix", None)
        if remove_prefix is not None:
            with contextlib.suppress(Exception):  # space, not correctness: the next sweep
                remove_prefix(f"{study.uid}-{number}-")
                remove_prefix(f"ckpt-{study.uid}-{number}-")
        done.deleted.append(number)
    if done.kept_best is not None and not any(number == done.kept_best for _, number in listed):
        done.kept_best = None  # the best trial's checkpoint was not kept (an older study)
    return done


def record_provenance(storage: Storage, claim: Claim, attrs: dict[str, Any]) -> None:
    """Write a trial's provenance (host, worker, epochs trained, resumed_from ...) while this
    worker still holds it (fenced): for a trial that pauses at a rung or is handed back, which
    may end later without this worker (a study that ends on its budget ends them PRUNED)."""
    with storage.transaction() as conn:
        fence(conn, claim)
        upsert_attributes(conn, trial_user_attributes, claim.trial_id, attrs)


def describe(done: Sweep) -> str:
    """What a sweep did, in a line for the log and the run's summary."""
    deleted = f"checkpoints of {len(done.deleted)} ended trial(s) deleted"
    if done.kept_best is None:
        return deleted
    return (
        f"{deleted}; the best trial's ({done.kept_best}) kept for `hpsearch best --weights` "
        "(`hpsearch delete` removes it with the study)"
    )
