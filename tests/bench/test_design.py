"""bench/efficiency/design.py: the development suite's protocol pieces."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
from hypothesis import given
from hypothesis import strategies as st
from optuna.trial import TrialState

from bench.efficiency.design import DEV, STRATEGIES, _BackoffHedge, _HedgedAtRung, sh_bracket
from bench.efficiency.lcbench import LCBench
from search.db.trial_changes import light_trial
from search.sampling import hedge
from search.sampling.hedge import study_hedge_level
from search.worker.budget_and_promotion import Promoter
from tests.helpers.configs import hedge_config
from tests.helpers.lcbench import DATA, needs_data

REPO = Path(__file__).resolve().parents[2]


def test_the_suite_refuses_any_instance_outside_the_development_set(tmp_path: Path) -> None:
    cache = tmp_path / "cache.jsonl"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "bench.efficiency.design", "--instances", "3945,1",
         "--cache", str(cache)],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "not a development instance" in proc.stderr and "Traceback" not in proc.stderr
    assert not cache.exists()
    assert len(DEV) == 24 and len(set(DEV)) == 24


@needs_data
def test_metrics_read_the_surrogates_column_cross_entropy_negated() -> None:
    params = {
        "batch_size": 64, "learning_rate": 1e-3, "max_dropout": 0.2, "max_units": 256,
        "momentum": 0.9, "num_layers": 2, "weight_decay": 1e-3,
    }  # fmt: skip
    acc = LCBench("3945", DATA).curve(params).accuracy
    bal = LCBench("3945", DATA, metric="val_balanced_accuracy").curve(params).accuracy
    ce = LCBench("3945", DATA, metric="val_cross_entropy").curve(params).accuracy
    assert all(1 < a <= 100 for a in acc) and all(0 < b <= 1 for b in bal)
    assert all(c < 0 for c in ce) and ce[-1] > ce[0]  # the loss falls: its negation rises
    with pytest.raises(ValueError, match="unknown LCBench metric"):
        LCBench("3945", DATA, metric="val_loss")


@needs_data
def test_the_sh_bracket_finishes_its_first_three_trials_after_752_775_and_798_epochs() -> None:
    bench = LCBench("3945", DATA)
    run = sh_bracket(bench.curve, 800, 0, n=243, eta=3, levels=[1, 3, 9, 27, 50])
    # 243 x 1 + 81 x 2 + 27 x 6 + 9 x 18 epochs, then the last three trained 23 more each.
    assert [at for at, _ in run.finished] == [752, 775, 798]
    assert run.epochs == 800


def test_a_cached_study_is_not_reused_under_other_library_versions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same code under another optuna or numpy gave other trials after a few dozen (seen
    between two machines), so the cache key holds the libraries' versions too."""
    from bench.efficiency import design

    here = design.cache_key("default", "3945", 0, 5000, "val_accuracy")
    assert here == design.cache_key("default", "3945", 0, 5000, "val_accuracy")
    assert "optuna" in design.library_versions() and "numpy" in design.library_versions()
    monkeypatch.setattr(design, "library_versions", lambda: "optuna 9.9; numpy 9.9")
    assert design.cache_key("default", "3945", 0, 5000, "val_accuracy") != here
    assert design.cache_key("random", "3945", 0, 5000, "val_accuracy") != here


def test_a_cached_study_is_not_reused_on_a_cpu_whose_numpy_math_differs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """NumPy's AVX512 exp and log differ from the C library's in the last bit, and the same
    code, libraries and seed gave other trials on such a CPU: both benches' cache keys name
    it, and only it (a key made without it stays what it was)."""
    from bench.efficiency import design, numerics, runner
    from bench.efficiency.runner import Job, _cache_key

    job = Job("lcbench", "3945", "default", 0, 5000, 1, None, None, 0.002)

    def keys(simd: str) -> tuple[str, str, str]:
        monkeypatch.setattr(numerics, "numpy_simd", lambda: simd)
        monkeypatch.setattr(runner, "_CODE_HASHES", {})
        return (
            design.cache_key("default", "3945", 0, 5000, "val_accuracy"),
            design.library_versions(),
            _cache_key(job),
        )

    plain, avx512 = keys(""), keys("AVX512F")
    assert all(a != b for a, b in zip(plain, avx512, strict=True))
    assert "SIMD" not in plain[1] and avx512[1].endswith("; numpy SIMD AVX512F")


def test_numpy_simd_is_what_numpy_dispatches_to_and_off_when_switched_off() -> None:
    """`numpy_simd` reads NumPy's own dispatch: off in a process started with NumPy's AVX512
    switched off (how this machine reproduces studies cached on a CPU without it)."""
    from numpy.core._multiarray_umath import __cpu_features__

    from bench.efficiency.numerics import FEATURES, numpy_simd

    assert numpy_simd() == " ".join(f for f in FEATURES if __cpu_features__.get(f))
    # What this CPU has: on now, or already switched off by this process's environment.
    code = "from bench.efficiency.numerics import numpy_simd; print(repr(numpy_simd()))"
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=_avx512_off(),
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "''"


def test_no_worse_than_plain_tpe_means_half_a_point_in_every_metric_s_own_units() -> None:
    """The issue's 0.5 points are of accuracy in percent: balanced accuracy is a fraction (0.5
    would pass anything), cross-entropy has no points (half a percent of plain TPE's)."""
    from bench.efficiency.targets import tpe_tolerance

    assert tpe_tolerance("val_accuracy", 91.0) == 0.5
    assert tpe_tolerance("val_balanced_accuracy", 0.91) == 0.005
    assert tpe_tolerance("val_cross_entropy", -0.8) == pytest.approx(0.004)


@needs_data
def test_the_suite_s_summary_and_each_cached_study_say_what_made_them(tmp_path: Path) -> None:
    cache, summary = tmp_path / "cache.jsonl", tmp_path / "summary.json"
    env = {**os.environ, "PYTHONPATH": str(REPO), "YAHPO_DATA": str(DATA)}
    proc = subprocess.run(
        [sys.executable, "-m", "bench.efficiency.design", "--instances", "3945", "--seeds", "2",
         "--strategies", "random,optuna-tpe", "--budget-epochs", "60", "--jobs", "1",
         "--cache", str(cache), "--json", str(summary)],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in cache.read_text().splitlines()]
    written = json.loads(summary.read_text())
    assert len(rows) == 4 and all(row["seconds"] > 0 for row in rows)
    for made in (written["made"], *(row["made"] for row in rows)):
        assert "bench.efficiency.design" in made["command"] and made["commit"]
        assert len(made["load"]) == 3
    assert written["per_instance"]["3945"]["target"] > 50  # random search's mean final, in %


def _avx512_off() -> dict[str, str]:
    """An environment with NumPy's AVX512 switched off: the float64 math of a CPU without it,
    so the studies below are the same on every machine (bench/efficiency/numerics.py)."""
    from numpy.core._multiarray_umath import __cpu_features__

    already = set(os.environ.get("NPY_DISABLE_CPU_FEATURES", "").replace(",", " ").split())
    off = " ".join(
        f for f, on in __cpu_features__.items() if (on or f in already) and f.startswith("AVX512")
    )
    return {**os.environ, "NPY_DISABLE_CPU_FEATURES": off}


@needs_data
def test_the_default_does_not_settle_on_one_layer_where_only_five_layers_reach_the_top() -> None:
    """LCBench 167181: one-layer networks lead after an epoch or three, but they top out at
    78%; only five-layer ones reach 90% (random search's mean final is 91.7%). With Optuna's
    prior (one trial's weight) TPE across fidelities settled on one layer within ~50 trials on
    seeds 7 and 9 and ended at 78-81%; hpsearch's heavier prior keeps the other values in play
    there, but without the hedge it still settles on seeds 13 and 33 (79.0 and 79.9; 5 of 40
    seeds). The hedge (search.sampling.hedge: a trial drawn at random and first judged at rung 9,
    the gap to the next growing from 10 to 20 to 40 trials while hedges are not promoted past
    it, back to 10 once one is) finds the five-layer networks: every one of these seeds ends
    above random search's mean."""
    code = (
        "import sys\n"
        "from bench.efficiency.design import run_study\n"
        "for name, seed in [('unhedged', 13), ('unhedged', 33), ('default', 7), ('default', 9),"
        " ('default', 13), ('default', 33)]:\n"
        "    run = run_study(name, '167181', seed, 5000, 'val_accuracy', sys.argv[1])\n"
        "    print(name, seed, run.final)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(DATA)],
        env=_avx512_off(),
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    finals = {(n, int(s)): float(v) for n, s, v in (ln.split() for ln in done.stdout.splitlines())}
    assert finals[("unhedged", 13)] < 88 and finals[("unhedged", 33)] < 88, finals
    for seed in (7, 9, 13, 33):
        assert finals[("default", seed)] > 91.7, (seed, finals)


@given(hedge=st.booleans(), epochs=st.integers(28, 400), kept=st.integers(0, 4))
def test_the_simulated_default_pauses_hedges_where_the_workers_do(
    hedge: bool, epochs: int, kept: int
) -> None:
    """The hedge is stated twice: by the workers (search.sampling.hedge; the Promoter does not
    pause a hedged trial below its rung) and by the simulation the suite's choices were made
    on (bench.efficiency.design: `_HedgedAtRung`). Both pause a trial, hedged or not, first at
    the same rung, whichever rungs the rung rule has retired (`kept`: the index of the lowest
    rung it keeps)."""
    c = hedge_config("s", epochs=epochs)
    spec = STRATEGIES["hedge10-r9-backoff"]
    promoter = Promoter(None, SimpleNamespace(config=c, study_id=0))  # type: ignore[arg-type]
    levels = promoter.rungs.levels(0)
    kept = min(kept, len(levels) - 1)
    promoter.schedule.level, promoter.schedule.settled = levels[kept], True
    # What the worker reads from the trial (its HEDGE_ATTR, written where it was sampled).
    promoter.hedged_at = lambda trial_id: study_hedge_level(c) if hedge else None  # type: ignore[method-assign]
    claim = SimpleNamespace(number=17, trial_id=1)
    first = next(e for e in range(1, epochs) if promoter.pauses_at(claim, e))  # type: ignore[arg-type]

    assert study_hedge_level(c) == spec["hedge_level"]
    schedule = _HedgedAtRung(levels, maximize=True, at=spec["hedge_level"])
    schedule.level = levels[kept]
    assert (schedule.hedged_level() if hedge else schedule.level) == first


@given(promoted=st.lists(st.booleans(), min_size=1, max_size=8), until=st.integers(1, 600))
def test_the_simulated_backoff_hedges_the_trials_the_workers_hedge(
    promoted: list[bool], until: int
) -> None:
    """The spacing of the hedges, stated twice: by the workers (`next_is_hedge`, over the trials
    a sampler sees) and by the simulation (`_BackoffHedge`, hedge10-r9-backoff). With one
    worker each hedge is judged at its rung before the next trials start; the k-th hedge is
    promoted past it if `promoted[k % len]`. Both hedge the same trials."""
    spec = STRATEGIES["hedge10-r9-backoff"]
    level = spec["hedge_level"]
    assert (spec["hedge"], spec["hedge_backoff"]) == (hedge.EVERY, hedge.LONGEST)
    simulated = _BackoffHedge(
        optuna.samplers.RandomSampler(),
        0,
        spec["hedge"],
        longest=spec["hedge_backoff"],
        level=level,
    )
    seen: list[SimpleNamespace] = []  # the simulation's trials
    shown: list[optuna.trial.FrozenTrial] = []  # the trials a worker's sampler sees
    ours: list[int] = []
    study = SimpleNamespace(get_trials=lambda deepcopy: seen)
    for number in range(until):
        mine = hedge.next_is_hedge(shown, number)
        simulated.before_trial(study, SimpleNamespace(number=number))
        if mine:
            ours.append(number)
        won = mine and promoted[(len(ours) - 1) % len(promoted)]
        reached = level + 1 if won else (level if mine else 1)
        seen.append(SimpleNamespace(number=number, intermediate_values={reached: 0.5}))
        attrs = {hedge.HEDGE_ATTR: level} if mine else {}
        shown.append(light_trial(number, number, TrialState.COMPLETE, attrs, {reached: 0.5}))
    assert ours == simulated.hedges


@pytest.mark.slow
@needs_data
def test_ctrl_c_stops_a_design_run_in_one_line_and_leaves_no_process(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to the terminal's process group) ends the run with one line and exit
    status 130, its pool's processes with it; it printed a traceback from every process."""
    import signal
    import time

    cache, out = tmp_path / "c.jsonl", tmp_path / "o.json"
    args = ["--instances", "3945", "--seeds", "4", "--strategies", "default,random", "--jobs", "2"]
    args += ["--cache", str(cache), "--json", str(out), "--data", str(DATA)]
    run = subprocess.Popen(
        [sys.executable, "-m", "bench.efficiency.design", *args],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    children = Path(f"/proc/{run.pid}/task/{run.pid}/children")
    try:
        deadline = time.monotonic() + 60
        while len(pool := children.read_text().split()) < 2:  # the pool runs its studies
            assert run.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        time.sleep(1.0)
        os.killpg(run.pid, signal.SIGINT)
        _, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    assert run.returncode == 130, err
    assert err == f"design: stopped by SIGINT: the studies finished are in {cache}\n", err
    deadline = time.monotonic() + 10
    while [p for p in pool if Path(f"/proc/{p}").exists()] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pool if Path(f"/proc/{p}").exists()]
    assert not out.exists()
