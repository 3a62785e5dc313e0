"""One worker, one seed: the same trials in the same order, run after run (the default's TPE
learns from the running trial's reports, so sampling ahead in a thread while it trains made the
next point depend on the thread's timing)."""

from __future__ import annotations

import math
import random
import time
from pathlib import Path
from typing import Any

import optuna
import pytest

from search.db.storage import open_storage
from search.study.parse_config import parse_config
from search.study.studies import create_study, open_study
from search.worker.loop import Worker
from search.worker.trial import TrialOutcome, TrialRun
from tests.helpers.postgres import migrated


def jittery(run: TrialRun) -> TrialOutcome:
    """A smooth surrogate whose epochs take a random few milliseconds (as real epochs vary)."""
    lr, width = run.params["lr"], run.params["width"]
    value = None
    for epoch in range(max(run.reported, default=0) + 1, run.config.task.epochs + 1):
        time.sleep(random.choice([0.0, 0.0, 0.05]))
        fit = -((math.log10(lr) + 2.5) ** 2) - 0.02 * abs(width - 40)
        value = fit * (1 - 0.5**epoch) + 0.01 * epoch
        if run.report(epoch, value):
            return TrialOutcome(status="pruned", value=value)
    return TrialOutcome(status="completed", value=value)


def run_study(url: str) -> list[tuple[int, dict[str, Any], str]]:
    config = parse_config(
        {
            "study": {"name": "repeat", "sampler": "tpe", "seed": 7, "budget_epochs": 150},
            "pruner": {"type": "asha", "min_resource": 1, "reduction_factor": 3},
            "task": {"name": "digits", "epochs": 9},
            "space": {
                "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
                "width": {"type": "int", "low": 8, "high": 64},
            },
        }
    )
    storage = open_storage(url, create=True)
    try:
        create_study(storage, config)
        worker = Worker(
            storage, open_study(storage, "repeat"), run_trial=jittery, grace_s=5.0, progress=False
        )
        assert worker.run() == 0
    finally:
        storage.close()
    trials = optuna.load_study(study_name="repeat", storage=url).get_trials()
    return [(t.number, t.params, t.state.name) for t in trials]


@pytest.mark.slow
def test_one_worker_repeats_its_trials_run_after_run(tmp_path: Path) -> None:
    runs = [run_study(migrated(f"sqlite:///{tmp_path / f'run{i}.db'}")) for i in range(3)]
    assert len(runs[0]) > 20  # past TPE's 10 start-up trials: the model chose most of them
    assert runs[1] == runs[0]
    assert runs[2] == runs[0]
