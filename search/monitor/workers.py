"""The fleet as the database sees it: every worker of every machine (`hpsearch workers`), and
deleting a study with everything hpsearch keeps for it (`hpsearch delete`).

A worker is *alive* while it heartbeats within its grace period, *lost* once it has been silent
for longer (its trial goes back to the queue, `search.db.liveness.reap`), and *stopped* once it
exited and said so. Times are the database's clock, so heartbeat ages agree across machines.
Workers lost for longer than `LOST_SHOWN_FOR_S` (a machine that went away for good) are listed
only with stopped ones (`--all`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

import optuna

from search.db.fleet import delete_study_rows, read_workers
from search.db.liveness import live_workers
from search.db.storage import Storage, StorageError
from search.study.studies import StudyRef
from search.worker.artifacts import ArtifactStore
from search.worker.provenance import launched_by_label

__all__ = [
    "LOST_SHOWN_FOR_S",
    "FleetWorker",
    "age",
    "delete_study",
    "format_workers",
    "list_workers",
    "workers_json",
]

LOST_SHOWN_FOR_S = 86400.0
"""A lost worker is listed for a day after its last heartbeat; after that only with --all."""


@dataclass(frozen=True)
class FleetWorker:
    """One worker process, as `hpsearch workers` shows it."""

    worker_id: str
    study: str
    hostname: str
    pid: int
    device: str
    state: str
    """alive | lost | stopped"""
    trial: int | None
    """The number of the trial it runs (None: between trials, or its trial was taken back)."""
    epoch: int | None
    """The last epoch it reported for that trial."""
    heartbeat_age_s: float
    """Seconds since its last heartbeat, by the database's clock."""
    grace_s: float
    stop_reason: str | None
    launched_by: dict[str, str] | None = None
    """The Slurm job array task or Kubernetes pod that started it (None: started by hand)."""


def list_workers(
    storage: Storage, *, study_id: int | None = None, include_stopped: bool = False
) -> list[FleetWorker]:
    """Every worker (of one study), alive ones first, then lost, then stopped, newest first.

    Without `include_stopped` (`--all`): neither stopped workers nor those lost for longer
    than `LOST_SHOWN_FOR_S`."""
    listed = []
    rows = read_workers(storage, study_id)
    for row in rows:
        age = max(0.0, float(row.age))
        if row.stopped_at is not None:
            state = "stopped"
        else:
            state = "alive" if age <= row.grace_s else "lost"
        old = state == "lost" and age > LOST_SHOWN_FOR_S
        if (state == "stopped" or old) and not include_stopped:
            continue
        listed.append(
            FleetWorker(
                worker_id=row.worker_id,
                study=row.study_name,
                hostname=row.hostname,
                pid=row.pid,
                device=row.device,
                state=state,
                trial=row.number if state != "stopped" else None,
                epoch=row.epoch if state != "stopped" and row.number is not None else None,
                heartbeat_age_s=round(age, 1),
                grace_s=row.grace_s,
                stop_reason=row.stop_reason,
                launched_by=json.loads(row.launched_by) if row.launched_by else None,
            )
        )
    order = {"alive": 0, "lost": 1, "stopped": 2}
    listed.sort(key=lambda w: (order[w.state], w.study, w.hostname, w.heartbeat_age_s))
    return listed


def workers_json(listed: list[FleetWorker]) -> dict[str, Any]:
    """`hpsearch workers --json`: counts by state and one object per worker."""
    counts = {state: sum(w.state == state for w in listed) for state in ("alive", "lost")}
    return {**counts, "workers": [asdict(w) for w in listed]}


def format_workers(listed: list[FleetWorker]) -> str:
    if not listed:
        return "no workers"
    header = (
        "state",
        "study",
        "host",
        "pid",
        "device",
        "trial",
        "epoch",
        "heartbeat",
        "scheduler",
        "worker",
    )
    rows = [header]
    for w in listed:
        rows.append(
            (
                w.state if w.state != "stopped" else f"stopped ({w.stop_reason or '?'})",
                w.study,
                w.hostname,
                str(w.pid),
                w.device,
                "-" if w.trial is None else str(w.trial),
                "-" if w.epoch is None else str(w.epoch),
                f"{age(w.heartbeat_age_s)} ago",
                launched_by_label(w.launched_by),
                w.worker_id,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    alive, lost = (sum(w.state == s for w in listed) for s in ("alive", "lost"))
    lines.append(f"{alive} alive, {lost} lost")
    return "\n".join(line.rstrip() for line in lines)


def age(seconds: float) -> str:
    """'45s', '12m', '5h', '3d': how long ago, as `workers` and `studies` show it."""
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.0f}h"
    return f"{seconds / 86400:.0f}d"


def delete_study(
    storage: Storage, study: StudyRef, store: ArtifactStore, *, force: bool = False
) -> str:
    """Delete the study from Optuna's tables and everything hpsearch keeps for it: workers,
    leases, the sampling lock and checkpoints (in the database or in `store`'s directory).

    On PostgreSQL the database does the same when a study is deleted some other way
    (``optuna.delete_study``): hpsearch's rows reference the study and its trials ON DELETE
    CASCADE (migration 0004); checkpoint files in a directory are only removed here. Refuses
    (StorageError, exit 2) while live workers are on the study, unless `force`.
    """
    alive = live_workers(storage, study.study_id)
    if alive and not force:
        raise StorageError(
            f"study {study.name!r} has {alive} live worker(s) (see `hpsearch workers --study "
            f"{study.name}`): stop them first, or pass --force"
        )
    n_trials, gone, leases = delete_study_rows(storage, study.study_id)
    remove_prefix = getattr(store, "remove_prefix", None)
    if remove_prefix is not None:
        remove_prefix(f"{study.uid}-")  # every checkpoint of the study (TrialCheckpoints' ids)
        remove_prefix(f"ckpt-{study.uid}-")  # and those named before the dashboard served them
    optuna.delete_study(study_name=study.name, storage=storage.optuna_storage())
    return (
        f"study {study.name!r} deleted from {storage.safe_url}: {n_trials} trials, "
        f"{gone} workers, {leases} leases and its checkpoints"
    )
