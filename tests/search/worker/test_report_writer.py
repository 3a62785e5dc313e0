"""The background writer of intermediate values, on both databases: it gathers fast epochs into
one write, flushes on demand, hands what is unwritten to the trial's end, and gives up a trial
that was taken over."""

from __future__ import annotations

import time
from typing import Any

import optuna
import pytest
import sqlalchemy as sa

from search.db import claims, fenced_writes, liveness
from search.db.leases import Claim, LeaseLost
from search.db.storage import Storage, open_storage
from search.study.studies import create_study
from search.worker.report_writer import ReportWriter
from tests.helpers.configs import make_config
from tests.helpers.dispatch import claim_a_new_trial, register


def _claimed(storage: Storage, study_name: str, worker: str, grace_s: float = 60) -> Claim:
    ref, _ = create_study(storage, make_config(study_name, n_trials=1))
    worker = f"{worker}-{study_name}"  # the tests share one database
    register(storage, ref.study_id, worker, grace_s=grace_s)
    return claim_a_new_trial(storage, ref.study_id, worker)


class _Writes:
    """Counts the statements that write intermediate values."""

    def __init__(self, storage: Storage) -> None:
        self.count = 0
        sa.event.listen(storage.engine.engine, "before_cursor_execute", self._seen)

    def _seen(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if "INSERT INTO trial_intermediate_values" in statement:
            self.count += 1


def _stored(url: str, study_name: str) -> dict[int, float]:
    return optuna.load_study(study_name=study_name, storage=url).trials[0].intermediate_values


def _writer(storage: Storage, lost: list[Claim] | None = None) -> ReportWriter:
    return ReportWriter(
        storage,
        on_lost=(lost if lost is not None else []).append,
        on_error=lambda exc, what: None,
        on_success=lambda: None,
        coalesce_s=0.3,
    )


def test_fast_epochs_share_one_write(storage_url: str, study_name: str) -> None:
    storage = open_storage(storage_url)
    claim = _claimed(storage, study_name, "w1")
    writes = _Writes(storage)
    writer = _writer(storage)
    writer.begin(claim)
    for epoch in (1, 2, 3):
        writer.add(epoch, epoch / 10)  # returns at once: training does not wait
    deadline = time.monotonic() + 10
    while _stored(storage_url, study_name) != {1: 0.1, 2: 0.2, 3: 0.3}:
        assert time.monotonic() < deadline, "the values were never written"
        time.sleep(0.05)
    assert writes.count == 1  # three epochs within the coalescing window: one statement
    assert writer.end() == {}
    writer.close()


def test_flush_writes_now_and_end_hands_over_the_rest(storage_url: str, study_name: str) -> None:
    storage = open_storage(storage_url)
    claim = _claimed(storage, study_name, "w1")
    writer = ReportWriter(
        storage,
        on_lost=lambda c: None,
        on_error=lambda exc, what: None,
        on_success=lambda: None,
        coalesce_s=60.0,  # the background thread would wait a minute: only flush writes
    )
    writer.begin(claim)
    writer.add(1, 0.5)
    writer.flush()  # before a pruning decision, or a checkpoint being published
    assert _stored(storage_url, study_name) == {1: 0.5}
    writer.add(2, 0.6)
    leftover = writer.end()  # the trial ends: what is unwritten goes with its end
    assert leftover == {2: 0.6}
    fenced_writes.finish(storage, claim, "COMPLETE", 0.6, {}, {}, leftover)
    assert _stored(storage_url, study_name) == {1: 0.5, 2: 0.6}
    writer.close()


def test_a_taken_over_trial_is_given_up(storage_url: str, study_name: str) -> None:
    storage = open_storage(storage_url)
    claim = _claimed(storage, study_name, "w1", grace_s=0.05)
    time.sleep(0.2)  # w1 misses its heartbeats; w2 reaps its trial and takes it over
    taker = f"w2-{study_name}"
    register(storage, claim.study_id, taker, grace_s=60)
    assert [r.number for r in liveness.reap(storage, claim.study_id, 3)] == [claim.number]
    assert claims.claim_next_trial(storage, claim.study_id, taker) is not None
    lost: list[Claim] = []
    writer = _writer(storage, lost)
    writer.begin(claim)
    writer.add(1, 0.5)
    with pytest.raises(LeaseLost):
        writer.flush()
    writer.add(2, 0.6)
    deadline = time.monotonic() + 10
    while not lost:  # the background thread tells the worker too
        assert time.monotonic() < deadline, "the writer never noticed the lost lease"
        time.sleep(0.05)
    assert lost == [claim]
    assert _stored(storage_url, study_name) == {}
    writer.close()
