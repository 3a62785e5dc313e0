"""bench/efficiency/restarts.py: a restarted study put together from the default's studies."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bench.efficiency.restarts import BUDGET, SEED_STEP, restarted, stall_point
from bench.efficiency.stats import Run

REPO = Path(__file__).resolve().parents[2]


def test_a_search_stalls_once_k_finished_trials_in_a_row_do_not_beat_its_best() -> None:
    run = Run([(100, 0.5), (150, 0.7), (200, 0.6), (250, 0.7), (300, 0.69), (350, 0.8)], BUDGET)
    assert stall_point(run, 3, maximize=True) == 300  # 0.6, 0.7 (a tie is no better), 0.69
    assert stall_point(run, 4, maximize=True) is None  # 0.8 came in time
    # Minimised (cross-entropy): lower is better, and the same trials in any order of the list.
    loss = Run([(300, 0.4), (100, 0.5), (200, 0.45), (150, 0.3)], BUDGET)
    assert stall_point(loss, 2, maximize=False) == 300  # 0.5, then 0.3, then 0.45, 0.4
    assert stall_point(loss, 3, maximize=False) is None


def test_a_restarted_study_is_each_search_cut_where_it_stalls_and_keeps_every_best() -> None:
    first = Run([(200, 0.7), (260, 0.6), (320, 0.65), (380, 0.6), (4990, 0.9)], BUDGET)
    second = Run([(150, 0.8), (210, 0.75), (300, 0.79), (350, 0.78), (600, 0.85)], BUDGET - 380)
    third = Run([(170, 0.81)], BUDGET - 380 - 350)
    parts = {(7, BUDGET): first, (7 + SEED_STEP, BUDGET - 380): second}
    run, need = restarted(lambda s, b: parts.get((s, b)), 7, 3, 500, maximize=True)
    assert run is None and need == (7 + 2 * SEED_STEP, BUDGET - 730)  # the part it lacks
    parts[(7 + 2 * SEED_STEP, BUDGET - 730)] = third
    run, need = restarted(lambda s, b: parts.get((s, b)), 7, 3, 500, maximize=True)
    assert need is None and run is not None
    # The first search up to its stall (the 0.9 it would have found at 4,990 is not there), the
    # second from epoch 380 up to its stall, the third from 730: every value at its own epoch.
    assert run.finished == [
        (200, 0.7), (260, 0.6), (320, 0.65), (380, 0.6),
        (530, 0.8), (590, 0.75), (680, 0.79), (730, 0.78),
        (900, 0.81),
    ]  # fmt: skip
    assert run.extra["restarts"] == 2 and run.epochs == BUDGET


def test_no_restart_when_less_than_min_left_epochs_of_the_budget_remain() -> None:
    late = Run([(100, 0.7), (4600, 0.6), (4700, 0.6), (4800, 0.6), (4900, 0.65)], BUDGET)
    run, need = restarted(lambda s, b: {(0, BUDGET): late}.get((s, b)), 0, 3, 500, True)
    assert need is None and run is not None
    assert run.finished == late.finished and run.extra["restarts"] == 0


def test_it_refuses_any_instance_outside_the_development_set(tmp_path: Path) -> None:
    cache = tmp_path / "cache.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.efficiency.restarts", "--instances", "3945,1",
         "--cache", str(cache)],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO,
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "1: not a development instance" in proc.stderr
    assert not cache.exists()
