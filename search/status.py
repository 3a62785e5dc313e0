"""`hpsearch status`: trials by state, the best trial, and who runs what, read in a few queries."""

from __future__ import annotations

import json
import math
from typing import Any

import sqlalchemy as sa

from search.dispatch import now_sql
from search.storage import Storage
from search.study import StudyRef

__all__ = ["best_trial", "format_best", "format_status", "study_status"]


def study_status(storage: Storage, study: StudyRef) -> dict[str, Any]:
    """The status object printed by `hpsearch status --json` (SPEC's keys, and more)."""
    from optuna.distributions import json_to_distribution

    t = "hpsearch." if storage.is_postgres else ""
    config = study.config
    with storage.engine.connect() as conn:
        counts = dict(
            conn.execute(
                sa.text("SELECT state, count(*) FROM trials WHERE study_id = :s GROUP BY state"),
                {"s": study.study_id},
            ).all()
        )
        best = _best(conn, study)
        params: dict[str, Any] = {}
        if best is not None:
            for name, value, dist in conn.execute(
                sa.text(
                    "SELECT param_name, param_value, distribution_json FROM trial_params "
                    "WHERE trial_id = :t"
                ),
                {"t": best.trial_id},
            ):
                params[name] = json_to_distribution(dist).to_external_repr(value)
        running = conn.execute(
            sa.text(
                f"SELECT t.number, l.worker_id, w.hostname, w.device, l.epoch, "
                f"{now_sql(conn)} - l.claimed_at, {now_sql(conn)} - w.heartbeat_at "
                f"FROM trials t JOIN {t}trial_leases l ON l.trial_id = t.trial_id "
                f"LEFT JOIN {t}workers w ON w.worker_id = l.worker_id "
                "WHERE t.study_id = :s AND t.state = 'RUNNING' ORDER BY t.number"
            ),
            {"s": study.study_id},
        ).all()
        workers = conn.execute(
            sa.text(
                f"SELECT count(*) FROM {t}workers WHERE study_id = :s AND stopped_at IS NULL "
                f"AND {now_sql(conn)} - heartbeat_at <= grace_s"
            ),
            {"s": study.study_id},
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
        "live_workers": workers,
        "running_trials": [
            {
                "number": r[0],
                "worker_id": r[1],
                "hostname": r[2],
                "device": r[3],
                "epoch": r[4],
                "seconds": None if r[5] is None else round(r[5], 1),
                "heartbeat_age_s": None if r[6] is None else round(r[6], 1),
            }
            for r in running
        ],
    }


def best_trial(storage: Storage, study: StudyRef) -> tuple[int, float] | None:
    """(number, value) of the best complete trial so far, or None."""
    with storage.autocommit() as conn:
        row = _best(conn, study)
    return None if row is None else (row.number, float(row.value))


def _best(conn: sa.Connection, study: StudyRef) -> Any:
    order = "DESC" if study.config.study.direction == "maximize" else "ASC"
    return conn.execute(
        sa.text(
            "SELECT t.trial_id, t.number, v.value FROM trials t "
            "JOIN trial_values v ON v.trial_id = t.trial_id AND v.objective = 0 "
            "WHERE t.study_id = :s AND t.state = 'COMPLETE' AND v.value IS NOT NULL "
            f"ORDER BY v.value {order}, t.number LIMIT 1"
        ),
        {"s": study.study_id},
    ).first()


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
