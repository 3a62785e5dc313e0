"""Issue 27's targets as the suite's report states them (bench/efficiency/targets.py)."""

from __future__ import annotations

from typing import Any

from bench.efficiency.targets import item5


def _s(speedup: float | None, final: float, hi: float | None = None, reached: int = 5) -> dict:
    top = hi if hi is not None else (speedup or 0.0)
    return {
        "speedup": speedup,
        "speedup_ci90": [0.0, top],
        "final_mean": final,
        "seeds": 5,
        "seeds_reached": reached,
    }


def _instances(**by_instance: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {i: {"target": v.pop("target"), "strategies": v} for i, v in by_instance.items()}


def _met(rows: list[dict[str, Any]]) -> dict[str, bool | None]:
    return {r["target"].split(" (")[0]: r["met"] for r in rows}


def test_a_run_that_meets_every_target_says_so_and_one_that_does_not_names_what_it_misses() -> None:
    good = _instances(
        a={
            "target": 89.0,
            "default": _s(12.0, 90.0, hi=13.0),
            "optuna-tpe": _s(4.0, 90.4),
            "optuna-tpe-hyperband": _s(10.0, 89.5),
            "sh-bracket": _s(6.0, 89.0),
        },
        b={
            "target": 80.0,
            "default": _s(14.0, 85.0, hi=15.0),
            "optuna-tpe": _s(3.0, 84.0),
            "optuna-tpe-hyperband": _s(6.0, 83.0),
            "sh-bracket": _s(6.0, 82.0),
        },
    )
    rows = item5(good, "val_accuracy", True, 5000)
    assert all(r["met"] for r in rows), rows
    assert [r["measured"] for r in rows][:3] == ["13.0x", "2/2", "1.77x"]

    # b behind the SH bracket beyond its interval, below random search, far below plain TPE,
    # and 2 of its 5 seeds short of the target.
    good["b"]["strategies"]["default"] = _s(5.0, 79.0, hi=5.5, reached=3)
    good["b"]["strategies"]["sh-bracket"] = _s(7.0, 82.0)
    met = _met(item5(good, "val_accuracy", True, 5000))
    assert met == {
        "median speedup >= 12x": False,  # (12 + 5) / 2
        "at least the best of optuna-tpe, optuna-tpe-hyperband, sh-bracket within the 90% "
        "interval, every instance": False,
        "1.3x the best peer on the median": False,  # (1.2 + 0.71) / 2
        "final >= plain TPE's - 0.5 on at least 2 of 2 instances": False,
        "never below random search's final": False,
        ">= 97% of instance-seeds reach the target": False,  # 8 of 10
    }
    behind = item5(good, "val_accuracy", True, 5000)[1]["measured"]
    assert behind == "1/2 (behind: b)"


def test_a_minimised_metric_counts_lower_finals_as_better_with_a_relative_tolerance() -> None:
    run = _instances(
        a={
            "target": 0.40,
            "default": _s(5.0, 0.3000),
            "optuna-tpe": _s(2.0, 0.2990),  # 0.3000 <= 0.2990 * 1.005 = 0.30049: within
        },
        b={
            "target": 0.35,
            "default": _s(5.0, 0.3600),  # above random search's mean loss: worse
            "optuna-tpe": _s(2.0, 0.3000),
        },
    )
    rows = {r["target"]: r for r in item5(run, "val_cross_entropy", False, 1000)}
    assert rows["final >= plain TPE's - 0.5% on at least 2 of 2 instances"]["measured"] == "1/2"
    assert rows["never below random search's final"]["measured"] == "1 below (b)"
    # The 12x median is set for 5,000 epochs: shown, neither met nor missed at 1,000.
    assert rows["median speedup >= 12x (set for 5,000 epochs)"]["met"] is None


def test_smac_mf_in_the_run_adds_its_three_targets() -> None:
    run = _instances(
        a={"target": 80.0, "default": _s(10.0, 85.0), "smac-mf": _s(5.0, 86.5)},
        b={"target": 80.0, "default": _s(4.0, 85.0), "smac-mf": _s(6.0, 85.2)},
    )
    rows = {r["target"]: r for r in item5(run, "val_accuracy", True, 5000)}
    assert rows["ahead of smac-mf on the median speedup"]["measured"] == "7.0x against 5.5x"
    assert rows["ahead of smac-mf on at least 2 of 2 instances"]["met"] is False
    # The median of -1.5 and -0.2 points: -0.85, within 1 point.
    assert rows["final within 1 point of smac-mf's on the median"]["measured"] == "-0.85 points"
    assert rows["final within 1 point of smac-mf's on the median"]["met"] is True
