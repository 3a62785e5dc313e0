"""More budget for a study: raising `n_trials`, `budget_epochs` or `budget_hours` (the config
otherwise the same) continues it, whether it is running or over.

The stored config takes the new values, so every worker that joins spends the new total (the
epoch counter keeps what was spent); trials paused at a rung when the study ended become
promotable again, and trials it ended queued (cut by the budget in the middle of a rung, or
interrupted) are queued again to resume from their checkpoints (`search.db.reopen`); the
sampler keeps its history (the trials stay). The new budgets and the reopening are one
transaction that holds the study's row, as a worker ending the study does
(`search.db.pauses.end_waiting`): a raise that comes as the workers end the study either comes
first (they see it and go on) or after (it reopens what they ended). A value
below what was already spent, adding or removing a budget, or any other change is refused; a
config whose budget is below the stored one too (only `hpsearch extend` lowers a budget).
Workers already running take the new budgets too: before one ends a trial or the study for a
spent budget, or stops sampling at n_trials, it reads the stored budgets again (`reread_budgets`,
one row).
"""

from __future__ import annotations

import datetime
import json
import logging
from dataclasses import replace
from typing import Any

import sqlalchemy as sa

from search.db.reopen import reopen_ended, spent
from search.db.statements import upsert_attributes
from search.db.storage import Storage
from search.db.studies import CONFIG_ATTR, lock_study
from search.db.tables import study_system_attributes
from search.study.settings import ConfigError, StudyConfig

__all__ = ["BUDGET_KEYS", "budget_changes", "extend_study", "reread_budgets"]

logger = logging.getLogger("search.study.extend")

BUDGET_KEYS = ("n_trials", "budget_epochs", "budget_hours")


def budget_changes(old: StudyConfig, new: StudyConfig) -> dict[str, tuple[Any, Any]] | None:
    """{key: (old, new)} when the configs differ only in budgets both of them have; else None."""
    changed = {
        k: (getattr(old.study, k), getattr(new.study, k))
        for k in BUDGET_KEYS
        if getattr(old.study, k) != getattr(new.study, k)
    }
    if not changed or any(a is None or b is None for a, b in changed.values()):
        return None
    same_otherwise = replace(
        old, study=replace(old.study, **{k: b for k, (_, b) in changed.items()})
    )
    if same_otherwise.difference(new) is not None:
        return None
    return changed


def extend_study(
    storage: Storage, study: Any, config: StudyConfig, *, may_lower: bool = False
) -> Any | None:
    """`study` (a StudyRef) with `config`'s budgets, stored, if they are its only change; None if
    something else changed. ConfigError if a new budget is below what was spent, or below the
    stored one unless `may_lower` (`hpsearch extend`: a config run again after `extend` raised
    the study's budget must not quietly take it back)."""
    changes = budget_changes(study.config, config)
    if changes is None:
        return None
    used = spent(storage, study.study_id)
    for key, (old, new) in changes.items():
        if key == "budget_epochs" and new < used.epochs:
            raise ConfigError(
                f"study {study.name!r}: study.budget_epochs {old} -> {new} is below the "
                f"{used.epochs} epochs already trained"
            )
        if key == "n_trials" and new < used.trials:
            raise ConfigError(
                f"study {study.name!r}: study.n_trials {old} -> {new} is below the "
                f"{used.trials} trials the study already has"
            )
        if key == "budget_hours" and used.first_start is not None:
            now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
            hours = (now - used.first_start).total_seconds() / 3600
            if new < hours:
                raise ConfigError(
                    f"study {study.name!r}: study.budget_hours {old} -> {new} is below the "
                    f"{hours:.2f} hours already spent"
                )
    lowered = {k: (a, b) for k, (a, b) in changes.items() if b < a}
    if lowered and not may_lower:
        key, (old, new) = next(iter(lowered.items()))
        flag = "--" + key.replace("_", "-")
        raise ConfigError(
            f"study {study.name!r}: study.{key} {old} -> {new} would lower the study's budget "
            f"(raised with `hpsearch extend`?): raise it in the config too, or lower it on "
            f"purpose with hpsearch extend --study {study.name} {flag} {new:g}"
        )
    with storage.transaction() as conn:
        lock_study(conn, study.study_id)
        upsert_attributes(
            conn, study_system_attributes, study.study_id, {CONFIG_ATTR: config.to_dict()}
        )
        reopened = reopen_ended(conn, study.study_id)
    shown = ", ".join(f"study.{k} {a} -> {b}" for k, (a, b) in changes.items())
    logger.info(
        "study %r continues with %s budget (%s; %d epochs and %d trials spent); %d paused "
        "trial(s) promotable again%s",
        study.name,
        "a lower" if lowered else "more",
        shown,
        used.epochs,
        used.trials,
        len(reopened.paused),
        f"; {len(reopened.queued)} trial(s) cut by the budget (or interrupted) resume from "
        "their checkpoints"
        if reopened.queued
        else "",
    )
    return replace(study, config=config)


def reread_budgets(storage: Storage, study: Any) -> Any | None:
    """`study` (a StudyRef) with the budgets stored now, if they changed since it was read (a
    running worker's view after `hpsearch extend`); None if they did not. One row is read."""
    a = study_system_attributes
    with storage.autocommit() as conn:
        raw = conn.execute(
            sa.select(a.c.value_json).where(a.c.study_id == study.study_id, a.c.key == CONFIG_ATTR)
        ).scalar()
    if raw is None:
        return None  # the study is gone: the worker's own checks say so
    stored = json.loads(raw)["study"]
    now = {k: stored.get(k) for k in BUDGET_KEYS}
    if all(getattr(study.config.study, k) == v for k, v in now.items()):
        return None
    return replace(study, config=study.config.with_study(**now))
