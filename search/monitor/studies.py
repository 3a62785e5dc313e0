"""Every study in a storage, one line each (`hpsearch studies`): trials by state, the best value,
the budget used (when the config has `budget_epochs`), and when something last happened."""

from __future__ import annotations

import datetime
import math
from typing import Any

from search.db.storage import Storage
from search.db.studies import hpsearch_study_names, study_activity
from search.monitor.status import study_status
from search.monitor.workers import age
from search.study.studies import find_study

__all__ = ["format_studies", "list_studies"]


def list_studies(storage: Storage) -> list[dict[str, Any]]:
    """One object per hpsearch study (`hpsearch studies --json`), by name."""
    names = hpsearch_study_names(storage)
    listed = []
    for name in names:
        ref = find_study(storage, name)
        if ref is None:  # deleted meanwhile
            continue
        status = study_status(storage, ref)
        last, epochs = study_activity(storage, ref.study_id)
        listed.append(
            {
                "study": name,
                "direction": status.direction,
                "metric": status.metric,
                "n_trials": status.n_trials,
                **{
                    k: getattr(status, k)
                    for k in ("complete", "pruned", "failed", "running", "waiting", "paused")
                },
                "best": None if status.best is None else status.best.value,
                "epochs_trained": epochs,
                "budget_epochs": ref.config.study.budget_epochs,
                "budget": status.budget,
                "last_activity": None if last is None else last.isoformat(timespec="seconds"),
            }
        )
    return listed


def format_studies(listed: list[dict[str, Any]], *, now: datetime.datetime | None = None) -> str:
    if not listed:
        return "no studies (create one: hpsearch create CONFIG)"
    now = now or datetime.datetime.now()
    with_budget = any(s["budget_epochs"] is not None for s in listed)
    header = ["study", "done", "complete", "pruned", "failed", "running", "waiting", "best"]
    header += ["budget used"] * with_budget + ["last activity"]
    rows = [header]
    for s in listed:
        finished = s["complete"] + s["pruned"] + s["failed"]
        row = [
            s["study"],
            f"{finished}/{s['n_trials']}" if s["n_trials"] else str(finished),
            *(str(s[k]) for k in ("complete", "pruned", "failed", "running", "waiting")),
            "-" if s["best"] is None else f"{s['metric']} {_value(s['best'])}",
        ]
        if with_budget:
            # The study's epoch counter, as `hpsearch status` shows it (reserved epochs count).
            epochs = (s["budget"] or {}).get("epochs")
            row.append("-" if epochs is None else f"{epochs['used']}/{epochs['budget']} epochs")
        row.append(_ago(s["last_activity"], now))
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


def _value(value: float) -> str:
    return f"{value:.4g}" if math.isfinite(value) else str(value)


def _ago(when: str | None, now: datetime.datetime) -> str:
    if when is None:
        return "never"
    seconds = max(0.0, (now - datetime.datetime.fromisoformat(when)).total_seconds())
    return f"{age(seconds)} ago"
