"""A study's budget as used so far: the numbers, and the one line `status`, `status --watch`
and the dashboard (the study's user attribute ``budget``, written by the workers) show.

Example::

    >>> from search.study.settings import StudySettings
    >>> s = StudySettings(name="s", budget_epochs=5000)
    >>> spent = budget_spent(s, used=340, start=None)
    >>> spent
    {'epochs': {'budget': 5000, 'used': 340, 'left': 4660}}
    >>> budget_line(spent)
    '340/5000 epochs (4660 left)'
"""

from __future__ import annotations

import datetime

from search.study.settings import StudySettings

__all__ = ["budget_line", "budget_spent", "hours_since"]


def hours_since(start: datetime.datetime | None) -> float:
    """Hours spent since the study's first trial started (`start`: naive UTC, as Optuna
    stores it; None: no trial started, no hour spent). What `budget_hours` counts."""
    if start is None:
        return 0.0
    now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    return max(0.0, (now - start).total_seconds() / 3600)


def budget_spent(
    settings: StudySettings,
    used: int | None,
    start: datetime.datetime | None,
) -> dict[str, dict[str, float]] | None:
    """{"epochs": {budget, used, left}, "hours": {budget, used, left}} for the budgets the
    study has (None: it has none). `used`: epochs the fleet trained; `start`: the first trial's
    start (naive UTC, as Optuna stores it; None: no trial started, no hour spent)."""
    if not settings.has_budget:
        return None
    out: dict[str, dict[str, float]] = {}
    if settings.budget_epochs is not None:
        used = used or 0
        out["epochs"] = {
            "budget": settings.budget_epochs,
            "used": used,
            "left": max(0, settings.budget_epochs - used),
        }
    if settings.budget_hours is not None:
        hours = hours_since(start)
        out["hours"] = {
            "budget": settings.budget_hours,
            "used": round(hours, 4),
            "left": round(max(0.0, settings.budget_hours - hours), 4),
        }
    return out


def budget_line(spent: dict[str, dict[str, float]]) -> str:
    """'340/5000 epochs (4660 left), 0.52/12 h (11.48 left)'."""
    parts = []
    if "epochs" in spent:
        e = spent["epochs"]
        parts.append(f"{e['used']}/{e['budget']} epochs ({e['left']} left)")
    if "hours" in spent:
        h = spent["hours"]
        parts.append(f"{h['used']:.2f}/{h['budget']:g} h ({h['left']:.2f} left)")
    return ", ".join(parts)
