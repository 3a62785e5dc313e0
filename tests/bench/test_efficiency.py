"""bench/efficiency/runner.py's pieces: its statistics, the LCBench surrogate, and a surrogate study
through hpsearch's real path (workers, sampling, pruning, the database) on a tiny budget."""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from bench.efficiency.lcbench import EPOCHS, LCBench
from bench.efficiency.stats import (
    Run,
    distribution,
    epochs_to,
    incumbents,
    speedup,
    speedup_ci,
    summarize,
)
from tests.helpers.lcbench import DATA, needs_data

REPO = Path(__file__).resolve().parent.parent.parent
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


@needs_data
@pytest.mark.parametrize("metric", ["val_accuracy", "val_cross_entropy"])
def test_a_curve_is_exactly_what_yahpos_objective_function_returns(metric: str) -> None:
    """The curve's rows are built from one converted row (not YAHPO's per-row conversion):
    the numbers must stay YAHPO's to the bit."""
    bench = LCBench("3945", DATA, metric=metric)
    for i in range(5):
        params = {
            **README_POINT,
            "batch_size": 16 + 97 * i,
            "learning_rate": 10 ** (-3.9 + 0.7 * i),
            "max_dropout": 0.19 * i,
            "num_layers": 1 + i,
        }
        config = {**params, "OpenML_task_id": "3945"}
        rows = bench._bench.objective_function([{**config, "epoch": e} for e in range(1, 52)])
        times = [float(r["time"]) for r in rows]
        curve = bench.curve(params)
        assert curve.values == tuple(float(r[metric]) for r in rows[1:])
        assert curve.seconds == tuple(max(1e-3, times[e] - times[e - 1]) for e in range(1, 51))


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
    from search.study.parse_config import parse_config

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
    for attr in ("_multivariate", "_constant_liar", "_n_startup_trials", "_gamma"):
        assert getattr(built.inner, attr) == getattr(chosen.inner, attr), attr
    prior = [s.inner._parzen_estimator_parameters.prior_weight for s in (built, chosen)]
    assert prior[0] == prior[1] != 1.0  # hpsearch's prior across fidelities, not Optuna's


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--seeds", "0"], "--seeds: must be at least 1, got 0"),
        (["--seeds", "ten"], "argument --seeds: invalid int value: 'ten'"),
        (["--budget"], "argument --budget-epochs: expected one argument"),
        (["--sed", "3"], "unrecognized arguments: --sed 3"),
        (["--budget-epochs", "-5"], "--budget-epochs: must be at least 1, got -5"),
        (["--budget-epochs", "49"], "--budget-epochs: 49 is less than one full training (50"),
        (
            ["--benchmark", "digits", "--budget-epochs", "20"],
            "--budget-epochs: 20 is less than one full training (27 epochs on digits)",
        ),
        (["--workers", "0"], "--workers: must be at least 1, got 0"),
        (["--time-scale", "0"], "--time-scale: must be a finite number above 0, got 0.0"),
        (["--time-scale", "inf"], "--time-scale: must be a finite number above 0, got inf"),
        (["--cache", "nodir/c.jsonl"], "--cache: no directory nodir"),
        (["--cache", "."], "--cache: . is a directory"),
        (
            ["--workers", "2", "--jobs", "2"],
            "--jobs: studies of --workers 2 run one at a time, got --jobs 2",
        ),
        (["--strategies", "nope"], "--strategies: unknown or not for lcbench: nope"),
        (["--reference", "missing.json"], "--reference: cannot read missing.json"),
        (
            # A database that was never created (`createdb` first): the password masked.
            ["--storage", "postgresql+psycopg://postgres:secret@127.0.0.1:5432/hpsearch_no_db"],
            "--storage: cannot reach the database at "
            "postgresql+psycopg://postgres:***@127.0.0.1:5432/hpsearch_no_db: connection failed",
        ),
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
    assert done.stderr.startswith(f"bench.efficiency: {message}") and done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--suite", "test"], "--suite: unknown suite 'test' (known: dev)"),
        (["--metric", "val_f1"], "--metric: unknown metric 'val_f1'"),
        (["--suite", "dev", "--instances", "189906"], "--suite and --instances: give one"),
        (["--benchmark", "digits", "--metric", "val_cross_entropy"], "--metric: digits is"),
        (
            # Nothing cached for the instance (a typo, or another cache file): no empty report.
            ["--instances", "99999", "--report-only", "--cache", "none.jsonl"],
            "--report-only: no cached study of random search (the reference) for 99999",
        ),
    ],
)
def test_bad_suite_and_metric_flags_are_one_line_exit_2_and_nothing_written(
    args: list[str], message: str, tmp_path: Path
) -> None:
    test_bad_flags_are_one_line_exit_2_and_nothing_written(args, message, tmp_path)


def test_the_dev_suite_is_the_24_development_instances_with_more_seeds_on_the_named_five() -> None:
    from bench.efficiency.runner import DEV_INSTANCES, NAMED, _seeds_of, parse_args

    assert len(DEV_INSTANCES) == len(set(DEV_INSTANCES)) == 24
    assert set(NAMED) <= set(DEV_INSTANCES)
    args = parse_args(["--suite", "dev"])
    assert [_seeds_of(i, args) for i in ("189906", "126026")] == [10, 5]
    assert _seeds_of("126026", parse_args(["--suite", "dev", "--seeds", "3"])) == 3


def test_the_cache_key_holds_the_metric_the_workers_the_time_scale_and_the_code() -> None:
    from dataclasses import replace

    from bench.efficiency.runner import Job, _cache_key, code_version

    job = Job("lcbench", "189906", "random", 0, 5000, 1, None, None, 0.002)
    key = json.loads(_cache_key(job))
    assert key["code"] == code_version("hpsearch") and key["settings"]["sampler"] == "random"
    assert key["time_scale"] == 0  # one worker: epochs take no time
    changed = [
        replace(job, metric="val_cross_entropy"),
        replace(job, workers=8),
        replace(job, seed=1),
        replace(job, budget=4000),
        replace(job, strategy="default"),
        replace(job, strategy="sh-bracket"),
    ]
    keys = {_cache_key(j) for j in [job, *changed]}
    assert len(keys) == len(changed) + 1
    assert _cache_key(replace(job, workers=8, time_scale=0.01)) != _cache_key(changed[1])
    families = ("hpsearch", "optuna", "sim", "sh-bracket", "smac-mf")
    assert len({code_version(f) for f in families}) == len(families)


def test_sh_bracket_charges_exactly_the_budget_and_promotes_the_top_third() -> None:
    from bench.efficiency.sh_bracket import RUNGS, bracket_epochs, sh_bracket_study

    asked: list[tuple[int, list[float]]] = []

    def scores_at(configs: list[dict[str, float]], epoch: int) -> list[float]:
        asked.append((epoch, [c["x"] for c in configs]))
        return [c["x"] + epoch / 1000 for c in configs]  # x ranks them at every epoch

    space = {"x": {"type": "float", "low": 0.0, "high": 1.0}}
    run = sh_bracket_study(scores_at, 1000, seed=3, space=space)
    assert run.epochs == 1000 and bracket_epochs() == 798
    # The first bracket: 243 at 1 epoch, then the best 81, 27, 9, 3 (sorted best first).
    assert [(e, len(xs)) for e, xs in asked[:5]] == list(
        zip(RUNGS, (243, 81, 27, 9, 3), strict=True)
    )
    for (_, before), (_, after) in itertools.pairwise(asked[:5]):
        assert after == sorted(before, reverse=True)[: len(before) // 3]
    assert [at for at, _ in run.finished] == [752, 775, 798]
    assert [v for _, v in run.finished] == [x + 0.05 for x in asked[4][1]]
    # The second bracket's 202 epochs: new configurations, 202 of them for 1 epoch, then the end.
    assert asked[5][0] == 1 and len(asked[5][1]) == 1000 - 798 and len(asked) == 6
    assert not set(asked[5][1]) & set(asked[0][1])
    # A budget ending inside a rung: the configuration cut off there is not finished.
    assert sh_bracket_study(scores_at, 760, seed=3, space=space).finished == [
        (752, pytest.approx(max(asked[0][1]) + 0.05))
    ]
    assert sh_bracket_study(scores_at, 760, seed=3, space=space).epochs == 760


def test_a_minimised_metric_is_summarized_from_below() -> None:
    runs = [Run([(100, 2.0), (200, 0.5)], 400), Run([(150, 1.0)], 400)]
    s = summarize(runs, 400, target=1.0, maximize=False)
    # The mean incumbent: (2.0 + 1.0) / 2 = 1.5 at 150, (0.5 + 1.0) / 2 = 0.75 at 200.
    assert s["speedup"] == 400 / 200 and s["final_mean"] == pytest.approx(0.75)
    assert s["seeds_reached"] == 2 and s["median_epochs_to_target"] == 175


@needs_data
def test_plain_optunas_hyperband_gives_the_same_study_for_the_same_seed() -> None:
    # Its brackets come from a hash of the study's name: a generated name made every run
    # of one seed another study (3945 seed 0 at 1,000 epochs: 18 trials trained fully, twice
    # with other ones among them).
    from bench.efficiency.lcbench import LCBench
    from bench.efficiency.simulate import optuna_study

    bench = LCBench("3945", None)
    runs = [optuna_study(bench.curve, "tpe", "hyperband", 600, seed=0) for _ in range(2)]
    assert runs[0].finished == runs[1].finished and runs[0].epochs == runs[1].epochs == 600


def test_a_seed_that_trained_no_trial_fully_leaves_the_final_undefined_not_a_crash() -> None:
    # A budget of a few full trainings: one seed's pruner never let a trial finish.
    runs = [Run([(120, 0.9)], 150), Run([], 150)]
    for maximize in (True, False):
        s = summarize(runs, 150, target=0.5, maximize=maximize)
        assert s["final_mean"] is None and s["final_sd"] is None
        assert s["seeds_without_final"] == 1 and s["seeds"] == 2
    done = summarize(runs[:1], 150, target=0.5)
    assert done["final_mean"] == 0.9 and done["seeds_without_final"] == 0
    d = distribution([s, done])
    assert d["final_mean_median"] == 0.9 and d["instances_without_final"] == 1


@needs_data
def test_lcbench_scores_a_chosen_metric_in_its_direction() -> None:
    ce = LCBench("189906", DATA, metric="val_cross_entropy").curve(README_POINT)
    acc = LCBench("189906", DATA).curve(README_POINT)
    assert not ce.maximize and ce.score == tuple(-v for v in ce.values)
    assert ce.values[-1] < ce.values[0]  # the loss falls as it learns
    assert acc.values == acc.score == acc.accuracy and acc.seconds == ce.seconds
    bench = LCBench("189906", DATA, metric="val_cross_entropy")
    assert bench.scores_at([README_POINT], 9) == [ce.score[8]]
    with pytest.raises(ValueError, match="unknown LCBench metric"):
        LCBench("189906", DATA, metric="val_f1")


@needs_data
def test_the_surrogate_server_answers_the_curve_the_process_computes_itself() -> None:
    from bench.efficiency.smac_mf import SurrogateClient

    client = SurrogateClient(sys.executable, "189906", str(DATA), "val_cross_entropy")
    try:
        assert client.maximize is False
        got = client.curve(README_POINT, 17)
        with pytest.raises(RuntimeError, match=r"epochs must be 1\.\.50"):
            client.curve(README_POINT, 51)
        full = client.curve({**README_POINT, "num_layers": 3}, EPOCHS)
    finally:
        client.close()
    mine = LCBench("189906", DATA, metric="val_cross_entropy")
    assert got["values"] == list(mine.curve(README_POINT).values[:17])
    assert got["seconds"] == list(mine.curve(README_POINT).seconds[:17])
    assert full["values"] == list(mine.curve({**README_POINT, "num_layers": 3}).values)


SMAC_MISSING = None
try:
    from bench.efficiency.smac_mf import SMAC_VERSION, installed_version

    if installed_version() != SMAC_VERSION:
        SMAC_MISSING = (
            f"smac {SMAC_VERSION} is not in .bench-venvs/smac: `python -c 'from "
            "bench.efficiency.smac_mf import ensure_venv; ensure_venv()'` makes it (needs PyPI)"
        )
except Exception as exc:  # the skip says why
    SMAC_MISSING = f"cannot look for SMAC's virtualenv: {exc}"


@needs_data
@pytest.mark.skipif(SMAC_MISSING is not None, reason=SMAC_MISSING or "")
def test_smac_mf_stops_at_the_budget_and_charges_resumed_runs_less_than_shipped() -> None:
    from bench.efficiency.smac_mf import smac_study

    out = smac_study("189906", str(DATA), "val_accuracy", 400, seed=0)
    assert out["epochs"] == 400
    assert out["finished"], "Hyperband's first bracket trains a configuration to 50 epochs"
    generous = [at for at, _ in out["finished"]]
    shipped = [at for at, _ in out["shipped_finished"]]
    assert generous == sorted(generous) and generous[-1] <= 400
    # The same runs, each charged all its epochs: later, and fewer of them within the budget.
    assert all(s > g for s, g in zip(shipped, generous, strict=False))
    assert len(shipped) <= len(generous) and out["shipped_epochs_total"] > 400
    # Its values are the surrogate's accuracies at 50 epochs.
    assert all(50 < v <= 100 for _, v in out["finished"])


@needs_data
def test_metric_val_cross_entropy_is_minimised_by_the_strategies_and_the_speedup(
    tmp_path: Path,
) -> None:
    """The bench's tables on --metric val_cross_entropy: the lowest loss is a study's final,
    and a target is reached from above."""
    from bench.efficiency.sh_bracket import sh_bracket_study

    bench = LCBench("189906", DATA, metric="val_cross_entropy")
    run = sh_bracket_study(bench.scores_at, 798, seed=0)
    losses = [(at, -score) for at, score in run.finished]
    best, worst = min(v for _, v in losses), max(v for _, v in losses)
    assert len(losses) == 3 and all(v > 0 for _, v in losses) and best < worst
    target = (best + worst) / 2
    # Reached when a loss at or below the target finishes; read the wrong way round (as a
    # maximised metric) it would be when one at or above it does: another trial, another epoch.
    reached_at = min(at for at, v in losses if v <= target)

    def table(target: float) -> dict:
        ref = tmp_path / "ref.json"
        ref.write_text(json.dumps({"instances": {"189906": {"target": target}}}))
        out = tmp_path / "out.json"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "bench.efficiency",
                "--instances",
                "189906",
                "--strategies",
                "sh-bracket",
                "--seeds",
                "1",
                "--budget-epochs",
                "798",
                "--metric",
                "val_cross_entropy",
                "--reference",
                str(ref),
                "--json",
                str(out),
                "--data",
                str(DATA),
                "--jobs",
                "1",
            ],
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        result = json.loads(out.read_text())
        assert result["metric"] == "val_cross_entropy" and result["maximize"] is False
        return result["instances"]["189906"]["strategies"]["sh-bracket"]

    got = table(target)
    assert got["final_mean"] == pytest.approx(best)  # the lowest loss, not the highest
    assert got["finals"] == [pytest.approx(best)]
    assert got["speedup"] == pytest.approx(798 / reached_at)


@pytest.mark.slow
@needs_data
def test_killing_the_runner_stops_its_worker_processes(pg_url: str, tmp_path: Path) -> None:
    """`kill` of a `--workers 2` run ends it and the two worker processes it started, which
    otherwise trained on and then waited for the next study for ever."""
    import sqlalchemy as sa

    flags = "--instances 189906 --strategies default --seeds 3 --workers 2 --time-scale 0.01"
    files = ["--data", str(DATA), "--cache", str(tmp_path / "c.jsonl")]
    files += ["--json", str(tmp_path / "o.json")]
    runner = subprocess.Popen(
        [sys.executable, "-m", "bench.efficiency", *flags.split(), "--storage", pg_url, *files],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    engine = sa.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://", 1))
    running = sa.text(
        "SELECT count(*) FROM trials JOIN studies USING (study_id) "
        "WHERE study_name LIKE 'eff-189906-%' AND state = 'RUNNING'"
    )
    children: list[str] = []
    try:
        deadline = time.monotonic() + 120
        with engine.connect() as conn:
            while conn.execute(running).scalar() < 2:  # both workers inside a trial
                assert runner.poll() is None, runner.stderr.read() if runner.stderr else ""
                assert time.monotonic() < deadline, "the workers never started a trial"
                time.sleep(0.2)
        children = [  # the two workers (not multiprocessing's resource tracker)
            c
            for c in Path(f"/proc/{runner.pid}/task/{runner.pid}/children").read_text().split()
            if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()
        ]
        assert len(children) == 2, children
        runner.terminate()
        _, err = runner.communicate(timeout=60)
        deadline = time.monotonic() + 10  # a killed process is gone once it is reaped
        while (alive := [c for c in children if Path(f"/proc/{c}").exists()]) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.1)
    finally:
        engine.dispose()
        if runner.poll() is None:
            runner.kill()
        for c in children:  # whatever this test finds, it leaves no process behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(c), signal.SIGKILL)
    assert runner.returncode == 128 + 15, err
    assert "Traceback" not in err, err
    assert alive == [], f"worker processes left running: {alive}"


@pytest.mark.slow
@needs_data
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["kill", "ctrl-c"])
def test_a_study_cut_short_by_kill_or_ctrl_c_is_not_cached_and_the_run_stops(
    signum: int, tmp_path: Path
) -> None:
    """With one study at a time, the study runs in the runner's own process, where its Worker
    takes SIGTERM as a spot machine's notice (and Ctrl-C as a user's): it hands its trial back
    and ends the study early. The runner stops there, says so in one line with its exit
    status, and leaves the study cut short out of the cache (it was cached as if it had spent
    its budget, and the run went on; Ctrl-C ended in a traceback)."""
    cache = tmp_path / "c.jsonl"
    flags = "--instances 3945 --strategies default --no-reference --seeds 2 --jobs 1"
    flags += " --budget-epochs 3000"
    files = ["--data", str(DATA), "--cache", str(cache), "--json", str(tmp_path / "o.json")]
    runner = subprocess.Popen(
        [sys.executable, "-m", "bench.efficiency", *flags.split(), *files],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert runner.stderr is not None
        first = runner.stderr.readline()  # the first study, done and cached
        assert first.startswith("[1/2] 3945 default seed 0"), first + runner.stderr.read()
        time.sleep(1.0)  # inside the second one (a few seconds)
        assert runner.poll() is None, "the second study ended too soon to be cut short"
        runner.send_signal(signum)
        _, err = runner.communicate(timeout=60)
    finally:
        if runner.poll() is None:
            runner.kill()
    assert runner.returncode == 128 + signum, err
    assert "Traceback" not in err, err
    name = signal.Signals(signum).name
    assert f"stopped by {name}: 1 of 2 studies finished, kept in {cache}" in err, err
    lines = cache.read_text().splitlines()
    assert len(lines) == 1 and '"seed": 0' in lines[0], lines
    assert not (tmp_path / "o.json").exists()


def _still_living(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(pid)
    return alive


@pytest.mark.slow
@needs_data
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")
@pytest.mark.parametrize(
    ("pool", "flags", "started"),
    [
        # --jobs 2: the pool of studies. Its processes trained their studies to the end (about
        # ten seconds each here) and then printed a traceback of the result they could not send.
        ("jobs", "--seeds 2 --jobs 2", "[1/4]"),
        # --workers 2: the processes that join each study. They waited for the next study for
        # ever (still there 89 s after the kill).
        ("workers", "--seeds 1 --workers 2", None),
    ],
)
def test_the_runners_pools_end_when_the_runner_is_killed_with_sigkill(
    pool: str, flags: str, started: str | None, tmp_path: Path
) -> None:
    """SIGKILL reaches no handler: the processes the runner started must notice it has gone
    by themselves, and end within seconds, without a word."""
    flags = f"--instances 189906,167168 --strategies default --no-reference {flags}"
    files = ["--data", str(DATA), "--cache", str(tmp_path / "c.jsonl")]
    err = tmp_path / "stderr.txt"
    with err.open("w") as out:
        runner = subprocess.Popen(
            [sys.executable, "-m", "bench.efficiency", *flags.split(), *files],
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=subprocess.DEVNULL,
            stderr=out,
        )
    children = Path(f"/proc/{runner.pid}/task/{runner.pid}/children")
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 120
        if started is not None:  # a study has ended: one process starts a study, one is in one
            while started not in err.read_text() and time.monotonic() < deadline:
                assert runner.poll() is None, err.read_text()
                time.sleep(0.2)
            assert started in err.read_text(), "no study ended in two minutes"
        else:  # both workers and the resource tracker started, and into the first study
            while len(children.read_text().split()) < 3 and time.monotonic() < deadline:
                assert runner.poll() is None, err.read_text()
                time.sleep(0.2)
            time.sleep(8)
        pids = [int(pid) for pid in children.read_text().split()]
        assert len(pids) >= 2, pids  # the two pool processes (and the resource tracker)
    finally:
        runner.kill()
        runner.wait()
    printed = len(err.read_text())
    deadline = time.monotonic() + 8
    while _still_living(pids) and time.monotonic() < deadline:
        time.sleep(0.25)
    left = _still_living(pids)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"{pool} processes {left} outlived the runner killed with SIGKILL by 8 s"
    assert "Traceback" not in err.read_text()[printed:], err.read_text()[printed:]


def test_a_cache_line_cut_short_by_a_kill_is_left_out_and_the_next_line_starts_afresh(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run killed while it appended leaves half a line: the study on it runs again, and the
    next study's line is its own (not glued to the half line, which would lose both)."""
    from bench.efficiency.runner import Job, _append_cache, _read_cache

    cache = tmp_path / "c.jsonl"
    jobs = [Job("lcbench", "189906", "default", seed, 5000, 1, None, None, 0.0) for seed in (0, 1)]
    _append_cache(str(cache), jobs[0], Run([(50, 90.0)], 5000))
    whole = cache.read_text()
    cache.write_text(whole + whole[: len(whole) // 2])  # the second append, killed halfway
    assert len(_read_cache(str(cache))) == 1
    assert "1 line(s) cut short or unreadable, left out" in capsys.readouterr().err
    _append_cache(str(cache), jobs[1], Run([(50, 91.0)], 5000))
    runs = _read_cache(str(cache))
    assert sorted(r.finished[0][1] for r in runs.values()) == [90.0, 91.0]
    (tmp_path / "result.json").write_text('{\n  "made": {}\n}\n')
    with pytest.raises(ValueError, match="is not a cache of the benchmarks"):
        _read_cache(str(tmp_path / "result.json"))  # nothing is ever appended to it
