"""`hpsearch status`: trials by state, the best trial, and who runs what, read in a few queries.

All reads share one read-only transaction (`Storage.read`): on SQLite it takes no write lock,
so watching a study never slows its workers down.
"""

from __future__ import annotations

import datetime
import functools
import json
import math
from typing import Any

import sqlalchemy as sa
from optuna.distributions import json_to_distribution

from search.db.budget import epochs_used, first_start
from search.db.liveness import live_workers_clause
from search.db.statements import db_now
from search.db.storage import Storage
from search.db.tables import (
    trial_intermediate_values,
    trial_leases,
    trial_params,
    trial_rungs,
    trial_values,
    trials,
    workers,
)
from search.study.studies import StudyRef

__all__ = [
    "best_trial",
    "finished_of",
    "format_best",
    "format_budget",
    "format_status",
    "study_status",
]


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
            _best_statement(config.study.direction), {"study": study.study_id}
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
        paused = 0
        if config.pruner.pauses:
            paused = conn.execute(
                sa.select(sa.func.count()).where(
                    trial_rungs.c.study_id == study.study_id, trial_rungs.c.paused.is_(True)
                )
            ).scalar_one()
        budget = _budget(conn, study)
    return {
        "study": study.name,
        "direction": config.study.direction,
        "metric": config.study.metric,
        "n_trials": config.study.n_trials,
        "complete": counts.get("COMPLETE", 0),
        "pruned": counts.get("PRUNED", 0),
        "failed": counts.get("FAIL", 0),
        "running": counts.get("RUNNING", 0),
        "waiting": counts.get("WAITING", 0) - paused,
        "paused": paused,
        "budget": budget,
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


def _budget(conn: Any, study: StudyRef) -> dict[str, Any] | None:
    """{"epochs": {budget, used, left}, "hours": {budget, used, left}} for the budgets the
    study has (None: it has none)."""
    s = study.config.study
    if not s.has_budget:
        return None
    out: dict[str, Any] = {}
    if s.budget_epochs is not None:
        used = epochs_used(None, study.study_id, conn)
        out["epochs"] = {
            "budget": s.budget_epochs,
            "used": used,
            "left": max(0, s.budget_epochs - used),
        }
    if s.budget_hours is not None:
        start = first_start(None, study.study_id, conn)
        now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
        hours = 0.0 if start is None else (now - start).total_seconds() / 3600
        out["hours"] = {
            "budget": s.budget_hours,
            "used": round(hours, 4),
            "left": round(max(0.0, s.budget_hours - hours), 4),
        }
    return out


def format_budget(status: dict[str, Any]) -> str | None:
    """'  budget: 340/5000 epochs (4660 left), 0.52/12 h (11.48 left)', or None."""
    budget = status.get("budget")
    if not budget:
        return None
    parts = []
    if "epochs" in budget:
        e = budget["epochs"]
        parts.append(f"{e['used']}/{e['budget']} epochs ({e['left']} left)")
    if "hours" in budget:
        h = budget["hours"]
        parts.append(f"{h['used']:.2f}/{h['budget']:g} h ({h['left']:.2f} left)")
    return "  budget: " + ", ".join(parts)


def finished_of(status: dict[str, Any]) -> str:
    """'12/30 finished', or '12 finished' for a study without n_trials (a budget ends it)."""
    done = status["complete"] + status["pruned"] + status["failed"]
    return f"{done}/{status['n_trials']} finished" if status["n_trials"] else f"{done} finished"


def best_trial(storage: Storage, study: StudyRef) -> tuple[int, float] | None:
    """(number, value) of the best complete trial so far, or None."""
    with storage.autocommit() as conn:
        row = conn.execute(
            _best_statement(study.config.study.direction), {"study": study.study_id}
        ).first()
    return None if row is None else (row.number, float(row.value))


def format_status(status: dict[str, Any]) -> str:
    lines = [
        f"study {status['study']}: {finished_of(status)} "
        f"({status['metric']}, {status['direction']})",
        f"  complete {status['complete']}  pruned {status['pruned']}  failed {status['failed']}  "
        f"running {status['running']}  waiting {status['waiting']}  "
        f"paused {status['paused']}  live workers {status['live_workers']}",
        format_best(status),
    ]
    budget = format_budget(status)
    if budget:
        lines.insert(2, budget)
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
def _best_statement(direction: str) -> sa.Select:
    t, v = trials, trial_values
    order = v.c.value.desc() if direction == "maximize" else v.c.value.asc()
    return (
        sa.select(t.c.trial_id, t.c.number, v.c.value)
        .join(v, sa.and_(v.c.trial_id == t.c.trial_id, v.c.objective == 0))
        .where(
            t.c.study_id == sa.bindparam("study"),
            t.c.state == "COMPLETE",
            v.c.value.is_not(None),
        )
        .order_by(order, t.c.number)
        .limit(1)
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
