"""A worker resuming a paused trial just as the study ends (PostgreSQL, two real sessions)."""

from __future__ import annotations

import threading
import time
from typing import Any

import sqlalchemy as sa

from search.db import pauses
from search.db.storage import open_storage
from search.db.tables import trial_intermediate_values, trial_rungs, trials
from search.study.parse_config import parse_config
from search.study.studies import create_study


def _paused_trial(storage: Any, study_id: int) -> int:
    """A trial that trained one epoch and waits paused at rung 1, as ASHA leaves it."""
    with storage.transaction() as conn:
        trial_id = conn.execute(
            sa.insert(trials)
            .values(number=0, study_id=study_id, state="WAITING", datetime_start=sa.func.now())
            .returning(trials.c.trial_id)
        ).scalar_one()
        conn.execute(
            sa.insert(trial_intermediate_values).values(
                trial_id=trial_id, step=1, intermediate_value=0.5, intermediate_value_type="FINITE"
            )
        )
        conn.execute(
            sa.insert(trial_rungs).values(
                trial_id=trial_id, level=1, study_id=study_id, bracket=0, value=0.5, paused=True
            )
        )
    return trial_id


def test_a_resume_as_the_study_ends_neither_deadlocks_nor_loses_the_trial(
    pg_url: str, study_name: str
) -> None:
    """`claim_paused` takes the paused mark, then the trial; the study's end (`end_waiting`)
    must take them in the same order, or the two deadlock and PostgreSQL aborts one (which a
    worker then logs as an outage and retries). Here the resume holds the mark while the end
    starts, then moves the trial: both must go through, and the trial is the worker's."""
    config = parse_config(
        {
            "study": {"name": study_name, "budget_epochs": 30, "sampler": "random"},
            "pruner": {"type": "asha", "min_resource": 1, "reduction_factor": 3},
            "task": {"name": "digits", "epochs": 9},
            "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
        }
    )
    storage = open_storage(pg_url)
    ref, _ = create_study(storage, config)
    trial_id = _paused_trial(storage, ref.study_id)

    errors: list[BaseException] = []
    ended: list[Any] = []

    def end() -> None:
        try:
            ended.append(pauses.end_waiting(storage, ref.study_id, "budget"))
        except BaseException as exc:  # reported below
            errors.append(exc)

    ender = threading.Thread(target=end)
    with storage.engine.connect() as resume:
        # `_claim_paused`'s first two statements, with the study's end in between.
        unmarked = resume.execute(
            sa.update(trial_rungs)
            .where(trial_rungs.c.trial_id == trial_id, trial_rungs.c.paused.is_(True))
            .values(paused=False)
        ).rowcount
        assert unmarked == 1
        ender.start()
        time.sleep(2.0)  # the end runs until it waits for this transaction's lock
        try:
            started = resume.execute(
                sa.update(trials)
                .where(trials.c.trial_id == trial_id, trials.c.state == "WAITING")
                .values(state="RUNNING")
                .returning(trials.c.number)
            ).all()
            resume.commit()
        except sa.exc.DBAPIError as exc:
            resume.rollback()
            errors.append(exc)
            started = []
    ender.join(timeout=30)
    assert not ender.is_alive(), "the study's end still waits"
    assert errors == []
    assert started == [(0,)], "the resume did not get its trial"
    assert ended and ended[0] is not None and 0 not in ended[0][0], "the end took the trial"
    with storage.autocommit() as conn:
        state = conn.execute(sa.select(trials.c.state).where(trials.c.trial_id == trial_id))
        assert state.scalar_one() == "RUNNING"
