"""bench/systems/fleet.py: a fleet of real workers through a real PgBouncer (transaction
pooling) on the LCBench surrogate, two of them SIGKILLed mid-run; what a user relies on holds."""

from __future__ import annotations

import signal

import pytest

from bench.systems.fleet import main, run_fleet
from tests.helpers.lcbench import needs_data


@pytest.mark.slow
@pytest.mark.postgres
@needs_data
def test_sixteen_workers_through_pgbouncer_two_killed_spend_the_budget_exactly() -> None:
    fleet = run_fleet(
        16, budget=200, time_scale=0.02, kill=2, pool_size=8, grace_s=10, timeout_s=240
    )

    assert fleet.ended, fleet.summary()
    assert len(fleet.killed) == 2
    # The study ended: every trial COMPLETE or PRUNED, the killed workers' trials too.
    assert set(fleet.states) <= {"COMPLETE", "PRUNED"}, fleet.summary()
    assert fleet.numbers_ok and not fleet.gaps, fleet.summary()
    # The budget: the counter says exactly the budget; nothing trained or reported beyond it.
    assert fleet.epochs_counter == 200
    assert fleet.epochs_reported <= fleet.epochs_trained <= 200, fleet.summary()
    # No trial trained by two processes at once.
    assert fleet.overlapping_runs == []
    # The others left on their own when the study was done.
    assert fleet.exit_codes == {0: 14, -signal.SIGKILL: 2}
    # 16 workers, at most 8 server connections: PgBouncer's pool, whatever the clients hold.
    assert 0 < fleet.peak_server_connections <= 8 < fleet.peak_clients
    assert fleet.anomalies() == []


def test_bad_input_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--workers", "4", "--kill", "4"]) == 2
    assert main(["--instance", "3"]) == 2  # not a development instance: never run
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "fleet: error: --kill: must be below --workers (4), got 4",
        "fleet: error: --instance: not an LCBench development instance: 3",
    ]
