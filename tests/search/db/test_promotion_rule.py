"""The SQL of `search.db.pauses` decides what `search.pruning.promotion.RungTable` states.

Promotion-based ASHA's rule is written once, in Python (`RungTable`); the database restates it
where the decision must be atomic across workers: which paused trial a free worker resumes
(`next_promotable`) and whether a trial arriving at a rung goes on or pauses
(`pass_rung_if_promotable`). Here both answer the same questions on generated rung tables (ties,
NaN, infinities, two brackets, a trial arriving at a rung it recorded before), on SQLite and on
PostgreSQL.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from search.db import pauses
from search.db.leases import Claim
from search.db.storage import Storage, open_storage
from search.db.tables import trial_rungs
from search.pruning.promotion import Paused, RungTable

LEVELS = (1, 3, 9)
# Few distinct values, so that ties are common; NaN (stored NULL) and the infinities too.
VALUES = st.sampled_from([0.1, 0.2, 0.3, 0.5, -1.0, math.inf, -math.inf, math.nan])

# Trial and study ids of their own per example (trial_rungs is keyed by trial and level).
_ids = itertools.count(50_000_000, 1_000)


@dataclass(frozen=True)
class Row:
    trial_id: int
    bracket: int
    level: int
    value: float
    paused: bool


@st.composite
def rung_tables(draw: st.DrawFn) -> list[Row]:
    """Up to 25 trials, each in one bracket, recorded at a prefix of the rung levels."""
    rows = []
    for offset in range(draw(st.integers(0, 25))):
        bracket = draw(st.integers(0, 1))
        for level in LEVELS[: draw(st.integers(1, len(LEVELS)))]:
            rows.append(Row(offset, bracket, level, draw(VALUES), draw(st.booleans())))
    return rows


@pytest.fixture
def storage(storage_url: str) -> Iterator[Storage]:
    storage = open_storage(storage_url)
    yield storage
    storage.close()


def write(storage: Storage, study_id: int, base: int, rows: list[Row]) -> None:
    if not rows:
        return
    with storage.transaction() as conn:
        conn.execute(
            sa.insert(trial_rungs),
            [
                {
                    "trial_id": base + r.trial_id,
                    "level": r.level,
                    "study_id": study_id,
                    "bracket": r.bracket,
                    "value": None if math.isnan(r.value) else r.value,
                    "paused": r.paused,
                }
                for r in rows
            ],
        )


def table_of(rows: list[Row], maximize: bool) -> RungTable:
    table = RungTable(maximize=maximize)
    for r in rows:
        table.record(r.trial_id, r.bracket, r.level, r.value)
    return table


def rung_rows(storage: Storage, study_id: int) -> dict[tuple[int, int], Row]:
    """The study's rows of trial_rungs, by (trial id, level)."""
    r = trial_rungs
    with storage.autocommit() as conn:
        rows = conn.execute(
            sa.select(r.c.trial_id, r.c.bracket, r.c.level, r.c.value, r.c.paused).where(
                r.c.study_id == study_id
            )
        ).all()
    return {
        (t, lvl): Row(t, b, lvl, math.nan if v is None else float(v), bool(p))
        for t, b, lvl, v, p in rows
    }


SETTINGS = settings(
    max_examples=50,
    deadline=None,
    # One storage per test function; each example writes rows of its own study.
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@SETTINGS
@given(
    rows=rung_tables(),
    maximize=st.booleans(),
    eta=st.integers(2, 4),
    draining=st.booleans(),
)
def test_a_free_worker_resumes_the_trial_the_rule_picks(
    storage: Storage, rows: list[Row], maximize: bool, eta: int, draining: bool
) -> None:
    study_id = base = next(_ids)
    write(storage, study_id, base, rows)
    table = table_of(rows, maximize)
    paused = [Paused(r.trial_id, r.bracket, r.level, r.value) for r in rows if r.paused]
    want = table.next_to_resume(paused, reduction_factor=eta, draining=draining)
    got = pauses.next_promotable(storage, study_id, maximize=maximize, eta=eta, draining=draining)
    assert (got and (got.trial_id - base, got.level)) == (want and (want.trial_id, want.level))


@SETTINGS
@given(
    rows=rung_tables(),
    arriving=st.integers(0, 30),
    level=st.sampled_from(LEVELS),
    value=VALUES,
    bracket=st.integers(0, 1),
    maximize=st.booleans(),
    eta=st.integers(2, 4),
)
def test_a_trial_at_a_rung_goes_on_when_the_rule_says_so(
    storage: Storage,
    rows: list[Row],
    arriving: int,
    level: int,
    value: float,
    bracket: int,
    maximize: bool,
    eta: int,
) -> None:
    """`arriving` may be a trial of the table (then in its own bracket, possibly at a rung it
    recorded before: a trial re-run from an earlier checkpoint) or a new one."""
    bracket = next((r.bracket for r in rows if r.trial_id == arriving), bracket)
    study_id = base = next(_ids)
    write(storage, study_id, base, rows)
    table = table_of(rows, maximize)
    want = table.goes_on(arriving, bracket, level, value, reduction_factor=eta)
    claim = Claim(base + arriving, arriving, study_id, "w", 1)
    got = pauses.pass_rung_if_promotable(
        storage, claim, bracket, level, value, maximize=maximize, eta=eta
    )
    assert got == want
    # Going on records the trial at the rung (replacing what it recorded there); pausing
    # writes nothing here.
    recorded = rung_rows(storage, study_id)
    before = next((r for r in rows if (r.trial_id, r.level) == (arriving, level)), None)
    row = recorded.get((base + arriving, level))
    if got:
        assert row is not None and not row.paused
        assert (row.value == value) or (math.isnan(row.value) and math.isnan(value))
    elif before is None:
        assert row is None
    else:
        assert row is not None and row.paused == before.paused
