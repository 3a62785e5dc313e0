"""bench/efficiency/finals_noise.py: a peer against itself on two sets of seeds, and a strategy
against the peer, counted as the suite counts and on a test, read from a bench.efficiency cache."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bench.efficiency.finals_noise import compare
from bench.efficiency.runner import Job, _append_cache, _read_cache
from bench.efficiency.stats import Run

REPO = Path(__file__).resolve().parent.parent.parent


def _write(path: Path, finals: dict[tuple[str, str], list[float]], metric: str) -> None:
    for (instance, strategy), values in finals.items():
        for seed, value in enumerate(values):
            job = Job("lcbench", instance, strategy, seed, 5000, 1, None, None, 0.0, metric)
            _append_cache(str(path), job, Run([(50, value), (5000, value - 1.0)], 5000))


def test_a_strategy_a_point_below_is_worse_and_one_within_the_peers_spread_is_not(
    tmp_path: Path,
) -> None:
    cache = tmp_path / "c.jsonl"
    tpe = [90.0, 90.2, 89.8, 90.1, 89.9, 90.0, 90.3, 89.7, 90.0, 90.0]
    _write(
        cache,
        {
            ("a", "optuna-tpe"): tpe,
            ("a", "default"): [88.9, 89.1, 89.0, 88.8, 89.2],  # a point below, tight
            ("b", "optuna-tpe"): tpe,
            ("b", "default"): [89.8, 90.1, 90.0, 89.9, 90.2],  # the peer's own spread
            # the peer's second five seeds a point below its first five
            ("c", "optuna-tpe"): tpe[:5] + [x - 1.0 for x in tpe[5:]],
            ("c", "default"): tpe[:5],
        },
        "val_accuracy",
    )
    got = compare(
        _read_cache(str(cache)),
        ["a", "b", "c"],
        "val_accuracy",
        5,
        "default",
        "optuna-tpe",
        5000,
        0.05,
    )
    assert not isinstance(got, str)
    rows = got["instances"]
    assert rows["a"]["worse"] and not rows["a"]["within"]  # 89.0 against 90.0 - 0.5
    assert not rows["b"]["worse"] and rows["b"]["within"]
    assert not rows["c"]["peer_within"] and rows["c"]["peer_worse"] and rows["c"]["within"]
    assert got["counts"]["peer_within"] == 2 and got["counts"]["worse"] == ["a"]
    assert got["counts"]["peer_worse"] == ["c"]


def test_cross_entropy_is_read_minimised_and_a_missing_study_is_named(tmp_path: Path) -> None:
    cache = tmp_path / "c.jsonl"
    # Losses: the best fully trained value is the lowest; the default's are 20% higher.
    tpe = [0.30, 0.31, 0.29, 0.30, 0.30, 0.31, 0.29, 0.30, 0.30, 0.30]
    finals = {("a", "optuna-tpe"): tpe, ("a", "default"): [0.36, 0.37, 0.35, 0.36, 0.36]}
    for (instance, strategy), values in finals.items():
        for seed, value in enumerate(values):
            job = Job(
                "lcbench", instance, strategy, seed, 5000, 1, None, None, 0.0, "val_cross_entropy"
            )
            _append_cache(str(cache), job, Run([(50, value + 0.2), (100, value)], 5000))
    got = compare(
        _read_cache(str(cache)), ["a"], "val_cross_entropy", 5, "default", "optuna-tpe", 5000, 0.05
    )
    assert not isinstance(got, str)
    assert got["instances"]["a"]["worse"] and got["instances"]["a"]["strategy"] < -0.35
    missing = compare(
        _read_cache(str(cache)),
        ["a", "b"],
        "val_cross_entropy",
        5,
        "default",
        "optuna-tpe",
        5000,
        0.05,
    )
    assert missing == "b optuna-tpe seed 0"


def _command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench.efficiency.finals_noise", *args],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_command_says_what_to_run_when_the_cache_lacks_a_study(tmp_path: Path) -> None:
    cache = tmp_path / "c.jsonl"
    cache.write_text("")
    done = _command("--cache", str(cache))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "not in" in done.stderr and "python -m bench.efficiency --suite dev" in done.stderr
    few = _command("--cache", str(cache), "--seeds", "1")
    assert few.returncode == 2 and "--seeds must be at least 2" in few.stderr
    nowhere = _command("--cache", str(cache), "--json", str(tmp_path / "no" / "out.json"))
    assert nowhere.returncode == 2 and "--json: no directory" in nowhere.stderr
