"""Checkpoint pointers: which artifact holds a trial's latest checkpoint.

A trial's pointer is its system attribute `POINTER_ATTR`; beside it, Optuna's own
``artifacts:<id>`` attribute lists the artifact for the dashboard. Moving the pointer checks the
lease in the same transaction (a worker that lost its trial cannot move it) and drops the
previous artifact's listing; the caller then deletes the previous artifact itself.
"""

from __future__ import annotations

from typing import Any

from search.db.leases import Claim, fence
from search.db.statements import delete_system_attr, read_system_attr, upsert_attributes
from search.db.storage import Storage
from search.db.tables import trial_system_attributes

__all__ = ["POINTER_ATTR", "drop_pointer", "move_pointer", "read_pointer"]

POINTER_ATTR = "hpsearch:checkpoint"
"""Trial system attribute: the artifact holding the trial's latest checkpoint."""


def move_pointer(
    storage: Storage, claim: Claim, pointer: dict[str, Any], artifact_meta: str
) -> str | None:
    """Point the trial at a new checkpoint artifact (`pointer["artifact_id"]`), listed for the
    dashboard with Optuna's artifact metadata JSON; returns the previous artifact's id."""
    with storage.transaction() as conn:
        fence(conn, claim)
        previous = read_system_attr(conn, claim.trial_id, POINTER_ATTR)
        upsert_attributes(
            conn,
            trial_system_attributes,
            claim.trial_id,
            {POINTER_ATTR: pointer, f"artifacts:{pointer['artifact_id']}": artifact_meta},
        )
        if previous is not None:
            delete_system_attr(conn, claim.trial_id, f"artifacts:{previous['artifact_id']}")
    return None if previous is None else previous["artifact_id"]


def drop_pointer(storage: Storage, trial_id: int) -> None:
    """Forget the trial's checkpoint (it is finished); the caller deletes the artifacts."""
    with storage.transaction() as conn:
        previous = read_system_attr(conn, trial_id, POINTER_ATTR)
        if previous is not None:
            delete_system_attr(conn, trial_id, POINTER_ATTR)
            delete_system_attr(conn, trial_id, f"artifacts:{previous['artifact_id']}")


def read_pointer(storage: Storage, trial_id: int) -> dict[str, Any] | None:
    with storage.autocommit() as conn:
        return read_system_attr(conn, trial_id, POINTER_ATTR)
