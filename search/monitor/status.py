"""`hpsearch status`: trials by state, the best trial, and who runs what, read in a few queries.

All reads share one read-only transaction (`Storage.read`): on SQLite it takes no write lock,
so watching a study never slows its workers down.
"""

from __future__ import annotations

import functools
import json
import math
from typing import Any

import sqlalchemy as sa
from optuna.distributions import json_to_distribution

from search.db.liveness import live_workers_clause
from search.db.statements import db_now
from search.db.status import best_statement
from search.db.storage import Storage
from search.db.tables import (
    trial_intermediate_values,
    trial_leases,
    trial_params,
    trials,
    workers,
)
from search.study.studies import StudyRef

__all__ = ["format_best", "format_status", "study_status"]


def study_status(storage: Storage, study: StudyRef) -> dict[str, Any]:
    """The status object printed by `hpsearch status --json` (README lists its keys)."""
    config = study.config
    with storage.read() as conn:
        dialect = conn.dialect.name
        counts = dict(
            conn.execute(
                sa.select(trials.c.state, sa.func.count())
                .where(trials.c.study_id == study.study_id)
                .group_by(trials.c.state)
            ).all()
        )
        best = conn.execute(
            best_statement(config.study.direction), {"study": study.study_id}
        ).first()
        params: dict[str, Any] = {}
        if best is not None:
            p = trial_params
            for name, value, dist in conn.execute(
                sa.select(p.c.param_name, p.c.param_value, p.c.distribution_json).where(
                    p.c.trial_id == best.trial_id
                )
            ):
                params[name] = json_to_distribution(dist).to_external_repr(value)
        running = conn.execute(_running_statement(dialect), {"study": study.study_id}).all()
        live = conn.execute(
            sa.select(sa.func.count()).where(
                workers.c.study_id == study.study_id, live_workers_clause(dialect)
            )
        ).scalar_one()
    return {
        "study": study.name,
        "direction": config.study.direction,
        "metric": config.study.metric,
        "n_trials": config.study.n_trials,
        "complete": counts.get("COMPLETE", 0),
        "pruned": counts.get("PRUNED", 0),
        "failed": counts.get("FAIL", 0),
        "running": counts.get("RUNNING", 0),
        "waiting": counts.get("WAITING", 0),
        "best": None
        if best is None
        else {"number": best.number, "value": float(best.value), "params": params},
        "live_workers": live,
        "running_trials": [
            {
                "number": r.number,
                "worker_id": r.worker_id,
                "hostname": r.hostname,
                "device": r.device,
                "epoch": r.epoch,
                "last_value": None if r.last_value is None else float(r.last_value),
                "seconds": None if r.seconds is None else round(r.seconds, 1),
                "heartbeat_age_s": None if r.heartbeat_age is None else round(r.heartbeat_age, 1),
            }
            for r in running
        ],
    }


def format_status(status: dict[str, Any]) -> str:
    done = status["complete"] + status["pruned"] + status["failed"]
    lines = [
        f"study {status['study']}: {done}/{status['n_trials']} finished "
        f"({status['metric']}, {status['direction']})",
        f"  complete {status['complete']}  pruned {status['pruned']}  failed {status['failed']}  "
        f"running {status['running']}  waiting {status['waiting']}  "
        f"live workers {status['live_workers']}",
        format_best(status),
    ]
    if status["running_trials"]:
        lines.append("  running:")
        lines.append(f"    {'trial':>5}  {'epoch':>5}  {'for':>8}  worker")
        for r in status["running_trials"]:
            seconds = "-" if r["seconds"] is None else f"{r['seconds']:.0f}s"
            where = f"{r['worker_id']} ({r['device']})" if r["worker_id"] else "(being sampled)"
            lines.append(f"    {r['number']:>5}  {r['epoch']:>5}  {seconds:>8}  {where}")
    return "\n".join(lines)


def format_best(status: dict[str, Any]) -> str:
    best = status["best"]
    if best is None:
        return "  best: none yet (no complete trial)"
    value = best["value"]
    shown = f"{value:.6g}" if math.isfinite(value) else str(value)
    return (
        f"  best: trial {best['number']}  {status['metric']} {shown}  "
        f"params {json.dumps(best['params'])}"
    )


@functools.cache
def _running_statement(dialect: str) -> sa.Select:
    t, lease, w, iv = trials, trial_leases, workers, trial_intermediate_values
    now = db_now(dialect)
    last_value = (
        sa.select(iv.c.intermediate_value)
        .where(iv.c.trial_id == t.c.trial_id)
        .order_by(iv.c.step.desc())
        .limit(1)
        .scalar_subquery()
    )
    return (
        sa.select(
            t.c.number,
            lease.c.worker_id,
            w.c.hostname,
            w.c.device,
            lease.c.epoch,
            last_value.label("last_value"),
            (now - lease.c.claimed_at).label("seconds"),
            (now - w.c.heartbeat_at).label("heartbeat_age"),
        )
        .join(lease, lease.c.trial_id == t.c.trial_id)
        .outerjoin(w, w.c.worker_id == lease.c.worker_id)
        .where(t.c.study_id == sa.bindparam("study"), t.c.state == "RUNNING")
        .order_by(t.c.number)
    )
