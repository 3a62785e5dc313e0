"""The chaos soak, short: every fault at once on a real PostgreSQL (see bench/chaos.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from bench.chaos import run_soak


def test_a_study_survives_every_fault_at_once(
    private_pg: tuple[str, Callable[..., None]], tmp_path: Path
) -> None:
    url, restart = private_pg
    soak = run_soak(url, restart, tmp_path, n_trials=24, n_workers=4, seed=1, timeout_s=170)
    print(soak.tally())
    assert soak.numbers == list(range(24))  # exactly n_trials, no number twice
    assert set(soak.states) <= {"COMPLETE", "PRUNED", "FAIL"}  # nothing RUNNING or WAITING
    assert soak.poisoned["state"] == "FAIL" and soak.poisoned["attempts"] == 3
    assert soak.poisoned["reason"].startswith("its worker died 3 times (max_attempts = 3)")
    assert all(soak.fail_reasons.values()), soak.fail_reasons  # every FAIL says why
    assert soak.wrong_device_exit == 2
    assert soak.database_restarts == 1 and soak.kills + soak.sigterms >= 2
    assert not soak.overlapping_runs, soak.overlapping_runs
