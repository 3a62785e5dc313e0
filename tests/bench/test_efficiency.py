"""bench/efficiency/runner.py's pieces: its statistics, the LCBench surrogate, and a surrogate study
through hpsearch's real path (workers, sampling, pruning, the database) on a tiny budget."""

from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from bench.efficiency.lcbench import EPOCHS, LCBench, default_data_dir
from bench.efficiency.stats import Run, epochs_to, incumbents, speedup, speedup_ci, summarize

REPO = Path(__file__).resolve().parent.parent.parent
DATA = default_data_dir()
needs_data = pytest.mark.skipif(
    importlib.util.find_spec("yahpo_gym") is None
    or not (DATA / "lcbench" / "model.onnx").is_file(),
    reason=f"needs pip install -e '.[bench]' and YAHPO's LCBench data in {DATA} (or $YAHPO_DATA)",
)
README_POINT = {
    "batch_size": 64,
    "learning_rate": 1e-3,
    "max_dropout": 0.2,
    "max_units": 256,
    "momentum": 0.9,
    "num_layers": 2,
    "weight_decay": 1e-4,
}


def test_speedup_is_the_budget_over_the_first_epoch_the_mean_incumbent_reaches_the_target() -> None:
    fast = [Run([(100, 0.80), (200, 0.95)], 1000), Run([(150, 0.90)], 1000)]
    slow = [Run([(500, 0.90)], 1000), Run([(900, 0.92)], 1000)]
    # fast: both seeds have a trial by 150 (mean 0.85); at 200 the mean is 0.925.
    assert speedup(fast, 1000, target=0.9) == 1000 / 200
    assert speedup(slow, 1000, target=0.9) == 1000 / 900
    assert speedup(slow, 1000, target=0.95) is None
    assert incumbents(fast, 1000)[1, 98] == -math.inf  # before its first full trial
    lo, hi = speedup_ci(fast + fast, 1000, target=0.9, n_boot=400)
    assert lo <= 5.0 <= hi
    assert epochs_to(slow[1], 0.91) == 900 and epochs_to(slow[0], 0.95) == math.inf
    summary = summarize(slow, 1000, target=0.95)
    assert summary["seeds_reached"] == 0 and summary["median_epochs_to_target"] is None
    assert summary["speedup"] is None and summary["speedup_ci90"] == [0.0, 0.0]
    assert summary["final_mean"] == pytest.approx(0.91)


@needs_data
def test_lcbench_curve_is_the_surrogates_accuracy_and_runtime_per_trained_epoch() -> None:
    bench = LCBench("189906", DATA)
    curve = bench.curve(README_POINT)
    assert len(curve.accuracy) == len(curve.seconds) == EPOCHS
    assert all(0 < a <= 100 for a in curve.accuracy) and all(s > 0 for s in curve.seconds)
    assert curve.accuracy[-1] > curve.accuracy[0]  # it learns
    assert bench.curve(dict(README_POINT)) is curve  # cached
    with pytest.raises(ValueError, match="unknown LCBench instance"):
        LCBench("1", DATA)


@pytest.mark.slow
@needs_data
def test_a_surrogate_study_runs_through_hpsearchs_workers_and_database(
    storage_url: str, study_name: str, tmp_path
) -> None:
    from bench.efficiency.runner import default_strategy, hpsearch_study, study_config

    sampler, pruner = default_strategy()  # README's defaults
    budget = 150
    config = study_config(study_name, sampler, pruner, 0, budget, "lcbench")
    run = hpsearch_study(storage_url, config, "lcbench", "189906", str(DATA), 1, 0.0, str(tmp_path))
    assert run.epochs == budget  # the study spent its budget, not an epoch more
    study = optuna.load_study(study_name=study_name, storage=storage_url)
    trials = study.get_trials(deepcopy=False)
    assert all(t.state.is_finished() for t in trials)
    # Every epoch the trial function trained is a report in the database, and every trial
    # trained to the end is a COMPLETE trial there with the surrogate's last value.
    assert sum(len(t.intermediate_values) for t in trials) == budget
    complete = sorted(t.value for t in trials if t.state.name == "COMPLETE")
    assert complete == sorted(v for _, v in run.finished)
    bench = LCBench("189906", DATA)
    for t in trials:
        if t.state.name == "COMPLETE":
            assert t.value == pytest.approx(bench.curve(t.params).accuracy[-1])


def test_the_chosen_sampler_variant_is_what_a_tpe_asha_study_samples_with() -> None:
    """bench/efficiency/variants.py's "chosen" row is the sampler hpsearch builds: if
    make_sampler changes, the measurement that chose it no longer describes it."""
    from bench.efficiency.variants import VARIANTS, make_variant
    from search.sampling.multifidelity import FidelitySampler
    from search.sampling.samplers import make_sampler
    from search.study.config import parse_config

    config = parse_config(
        {
            "study": {"name": "s", "budget_epochs": 100, "sampler": "tpe"},
            "pruner": {"type": "asha", "min_resource": 1, "reduction_factor": 3},
            "task": {"name": "digits", "epochs": 9},
            "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
        }
    )
    built, chosen = make_sampler(config, 7), make_variant(VARIANTS["chosen"], seed=7)
    assert isinstance(built, FidelitySampler) and isinstance(chosen, FidelitySampler)
    assert (built.mode, built.min_points) == (chosen.mode, chosen.min_points)
    for attr in ("_multivariate", "_constant_liar", "_n_startup_trials"):
        assert getattr(built.inner, attr) == getattr(chosen.inner, attr), attr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--seeds", "0"], "--seeds: must be at least 1, got 0"),
        (["--budget-epochs", "-5"], "--budget-epochs: must be at least 1, got -5"),
        (["--workers", "0"], "--workers: must be at least 1, got 0"),
        (["--time-scale", "0"], "--time-scale: must be above 0"),
        (["--strategies", "nope"], "--strategies: unknown or not for lcbench: nope"),
        (["--reference", "missing.json"], "--reference: cannot read missing.json"),
    ],
)
def test_bad_flags_are_one_line_exit_2_and_nothing_written(
    args: list[str], message: str, tmp_path: Path
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.efficiency", *args, "--json", "out.json"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"efficiency.py: {message}") and done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []
