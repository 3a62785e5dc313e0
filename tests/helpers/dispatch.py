"""A registered worker and a claimed trial, written as a worker's registration, sampling and
claiming write them, for tests that drive the data layer by hand."""

from __future__ import annotations

from search.db import claims, liveness, trial_rows
from search.db.leases import Claim
from search.db.storage import Storage


def register(storage: Storage, study_id: int, worker_id: str, grace_s: float) -> None:
    """A worker's registration, as `Worker.run` writes it."""
    liveness.register(
        storage,
        liveness.WorkerInfo(
            worker_id=worker_id,
            study_id=study_id,
            hostname="h",
            pid=1,
            device="cpu",
            grace_s=grace_s,
        ),
    )


def claim_a_new_trial(storage: Storage, study_id: int, worker_id: str) -> Claim:
    """A trial created, sampled (no params: none needed here) and claimed by `worker_id`, as a
    registered worker's sampling and claiming leave it."""
    trial_id, _ = trial_rows.create_trial(storage, study_id, worker_id)
    trial_rows.enqueue_sampled(storage, trial_id)
    claim = claims.claim_next_trial(storage, study_id, worker_id)
    assert claim is not None and claim.trial_id == trial_id
    return claim
