"""The chaos soak, short: every fault at once on a real PostgreSQL (see tests/soak/chaos.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.soak.chaos import run_soak

pytestmark = pytest.mark.slow


def other_fails(fail_reasons: dict[int, str]) -> dict[int, str]:
    """The FAILs not of the crash budget ("its worker died 3 times", the poisonous trial's, and
    in a rare soak that of a trial kill -9 hit three times): a restarted database or a stopped
    worker must fail no trial (an OperationalError at an ASHA rung did)."""
    return {n: r for n, r in fail_reasons.items() if not r.startswith("its worker died 3 times")}


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
    assert not other_fails(soak.fail_reasons), soak.fail_reasons
    assert soak.wrong_device_exit == 2
    assert soak.database_restarts == 1 and soak.kills + soak.sigterms >= 2
    assert not soak.overlapping_runs, soak.overlapping_runs


def test_promotion_based_asha_survives_every_fault_at_once(
    private_pg: tuple[str, Callable[..., None]], tmp_path: Path
) -> None:
    """Paused trials go through kills, SIGTERMs and a database restart: resumed from their
    checkpoints on any worker, never run twice at once, and none is left paused."""
    url, restart = private_pg
    soak = run_soak(
        url, restart, tmp_path, n_trials=18, n_workers=4, seed=2, timeout_s=170, pruner="asha"
    )
    print(soak.tally(), soak.fail_reasons)
    assert soak.numbers == list(range(18))
    assert set(soak.states) <= {"COMPLETE", "PRUNED", "FAIL"}  # nothing RUNNING, WAITING, paused
    assert soak.poisoned["state"] == "FAIL" and soak.poisoned["attempts"] == 3
    assert not other_fails(soak.fail_reasons), soak.fail_reasons
    assert soak.database_restarts == 1 and soak.kills + soak.sigterms >= 2
    assert not soak.overlapping_runs, soak.overlapping_runs
    assert soak.resumed_after_pause >= 1
