"""Faults a fleet meets, on real databases: a trial that kills every worker that runs it, and a
sampler that fails. Neither may stall the study or burn it."""

from __future__ import annotations

import json

import optuna
import pytest
import sqlalchemy as sa

from search.db.storage import open_storage
from search.db.studies import CONFIG_ATTR
from search.sampling.sample_ahead import queue_first_trials
from search.study.studies import create_study
from tests.helpers.configs import make_config
from tests.helpers.objectives import POISON_X, join_all, start_workers
from tests.helpers.processes import WorkerProcess, query

pytestmark = pytest.mark.slow


def test_a_poisonous_trial_fails_after_max_attempts_and_the_study_goes_on(
    storage_url: str, study_name: str
) -> None:
    storage = open_storage(storage_url)
    ref, _ = create_study(storage, make_config(study_name, n_trials=6, max_attempts=2))
    optuna.load_study(study_name=study_name, storage=storage_url).enqueue_trial(
        {"x": POISON_X}  # trial 0: kills its worker each time
    )
    queue_first_trials(storage, ref)
    workers = start_workers(storage_url, study_name, 3, objective="poisoned_curve", grace_s=1)
    codes = join_all(workers, timeout_s=180)
    assert sorted(codes) == [-9, -9, 0]  # two attempts died; the third worker finished

    study = optuna.load_study(study_name=study_name, storage=storage_url)
    trials = study.get_trials()
    assert len(trials) == 6 and all(t.state.is_finished() for t in trials)
    poisoned = trials[0]
    assert poisoned.params["x"] == POISON_X and poisoned.state.name == "FAIL"
    attempts = poisoned.system_attrs["hpsearch:failed_attempts"]
    assert [a["epoch"] for a in attempts] == [1, 1]
    assert len({a["worker_id"] for a in attempts}) == 2
    reason = poisoned.system_attrs["fail_reason"]
    assert reason.startswith("its worker died 2 times (max_attempts = 2): ")
    assert reason.count("at epoch 1 (silent for more than its 1 s grace period)") == 2
    assert all(t.state.name in ("COMPLETE", "PRUNED") for t in trials[1:])


def test_a_failing_sampler_stops_the_workers_with_one_line_and_leaves_no_trial(
    pg_url: str, study_name: str, tmp_path
) -> None:
    storage = open_storage(pg_url)
    ref, _ = create_study(storage, make_config(study_name, n_trials=4, sampler="tpe"))
    # A config no sampler can use (as an older hpsearch might have stored): low above high.
    config = ref.config.to_dict()
    config["space"]["lr"].update(low=1.0, high=0.1)
    with storage.transaction() as conn:
        conn.execute(
            sa.text(
                "UPDATE study_system_attributes SET value_json = :v "
                "WHERE study_id = :s AND key = :k"
            ),
            {"v": json.dumps(config), "s": ref.study_id, "k": CONFIG_ATTR},
        )
    workers = [
        WorkerProcess(pg_url, study_name, tmp_path, grace_s=5, name=f"w{i}") for i in range(2)
    ]
    codes = [w.wait(120) for w in workers]
    assert codes == [1, 1], [w.log() for w in workers]
    for worker in workers:
        last = worker.log().strip().splitlines()[-1]
        assert last.startswith("hpsearch: error: sampling trial 0 with the tpe sampler failed: ")
        assert "Traceback" not in worker.log()
    # Nothing left for anybody to wait for: no trial row without its params.
    rows = query(pg_url, "SELECT count(*) FROM trials WHERE study_id = :s", s=ref.study_id)
    assert rows[0][0] == 0
