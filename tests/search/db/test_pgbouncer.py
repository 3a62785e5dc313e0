"""hpsearch behind PgBouncer in transaction pooling (what README recommends beyond ~40 workers):
consecutive statements of one client may run on different server connections, so a session-level
lock or a server-side prepared statement would break there. 8 workers finish exactly n_trials."""

from __future__ import annotations

import optuna
import pytest

from search.db.storage import open_storage
from search.sampling.sample_ahead import queue_first_trials
from search.study.studies import create_study
from tests.helpers.configs import make_config
from tests.helpers.objectives import join_all, start_workers
from tests.helpers.processes import query

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("sampler", ["tpe", "random"])
def test_eight_workers_through_pgbouncer_finish_exactly_n_trials(
    pgbouncer_url: str, study_name: str, sampler: str
) -> None:
    storage = open_storage(pgbouncer_url)
    ref, _ = create_study(storage, make_config(study_name, n_trials=24, sampler=sampler))
    queue_first_trials(storage, ref)
    storage.close()
    assert join_all(start_workers(pgbouncer_url, study_name, 8), timeout_s=240) == [0] * 8

    numbers = [
        n
        for (n,) in query(
            pgbouncer_url,
            "SELECT t.number FROM trials t JOIN studies s USING (study_id) "
            "WHERE s.study_name = :n ORDER BY 1",
            n=study_name,
        )
    ]
    assert numbers == list(range(24))  # no overshoot, no number twice, no gap
    trials = optuna.load_study(study_name=study_name, storage=pgbouncer_url).get_trials()
    assert all(t.state.name in ("COMPLETE", "PRUNED") for t in trials)
    assert len({(t.params["x"], t.params["lr"]) for t in trials}) == 24
