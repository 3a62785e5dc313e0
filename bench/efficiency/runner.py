"""Search efficiency at equal compute: epochs until a strategy finds what random search finds.

    python -m bench.efficiency                                  # lcbench, 3 instances, 10 seeds
    python -m bench.efficiency --suite dev --jobs 2 \
        --strategies random,optuna-tpe,optuna-tpe-hyperband,sh-bracket,smac-mf,default \
        --cache bench/results/efficiency-lcbench-dev.jsonl \
        --json bench/results/efficiency-lcbench-dev.json
    python -m bench.efficiency --instances 189906 --seeds 3 --strategies random,default
    python -m bench.efficiency --instances 189906 --metric val_cross_entropy --budget-epochs 2000
    python -m bench.efficiency --workers 8 --strategies random,default
    python -m bench.efficiency --benchmark digits --budget-epochs 1350 --seeds 5

Benchmarks:

- ``lcbench``: YAHPO Gym's surrogate of LCBench (bench/efficiency/lcbench.py; `pip install -e
  '.[bench]'`, data in `--data`, default `$YAHPO_DATA`, else shared/bench-data/yahpo_data next to
  the repository). A trial "trains" 50 epochs; epoch e's score is the surrogate's `--metric`
  (val_accuracy, val_balanced_accuracy, or val_cross_entropy, which is minimised).
  `--suite dev` is issue 27's 24 development instances (`DEV_INSTANCES`; 5 seeds each, 10 on
  189906, 167168, 189873, 3945 and 7593, unless `--seeds`); `--instances` takes any instance.
  LCBench's other ten instances are the held-out test set: choices are made on dev only.
- ``digits``: real training of bench/efficiency/task.py (an MLP on 600 digits images), 27 epochs
  a trial, through hpsearch's own trainer.

Every study has a budget of `--budget-epochs` trained epochs (every epoch counts, pruned and
paused trials' too). Strategies:

- hpsearch's, run through its real path (bench/efficiency/real_path.py): `Worker`s (one in this
  process, or `--workers W` processes) claiming trials from the study in the database (SQLite in
  a temporary directory, or `--storage`), sampling and pruning as a study does; for lcbench the
  trial function (`SurrogateTrial`) reports the surrogate's curve in place of training. With
  W > 1 an epoch lasts the surrogate's recorded runtime for that configuration and epoch times
  `--time-scale` (default 1/500), so trials end in a realistic order. Names: ``default`` (the
  sampler and pruner of examples/digits.toml, README's defaults), ``random`` (no pruning: the
  reference), ``tpe``, ``tpe-hyperband``, ``random-hyperband``, ``tpe-asha``, ``random-asha``,
  ``tpe-hyperband-promotion``.
- plain Optuna 5.0, in this process (bench/efficiency/simulate.py; lcbench only):
  ``optuna-random``, ``optuna-tpe`` (no pruning), ``optuna-tpe-hyperband`` (min 1, eta 3),
  ``optuna-tpe-median``, ``optuna-random-hyperband``.
- peers (lcbench only): ``sh-bracket`` (bench/efficiency/sh_bracket.py: synchronous successive
  halving, 243 random configurations at 1 epoch, the best third on to 3, 9, 27 and 50, bracket
  after bracket, no model) and ``smac-mf`` (bench/efficiency/smac_mf.py: SMAC3 2.4.1's
  MultiFidelityFacade in its own virtualenv, .bench-venvs/smac, made on first use; charged only
  the epochs a run adds over the same configuration's longest earlier run; its tables also show
  ``smac-mf-shipped``, the same studies charged every epoch SMAC trains).
- ``sim-*``: promotion ASHA simulated in this process on a simulated clock with a real Optuna
  sampler (bench/efficiency/simulate.py), to explore settings quickly: ``sim-random-asha``,
  ``sim-tpe-asha`` (TPE seeing paused trials as running), ``sim-rung-asha`` and
  ``sim-rank-asha`` (TPE behind search/sampling/multifidelity.py).

The measure (bench/efficiency/stats.py): a study's incumbent at epoch e is its best fully
trained trial (all epochs) finished by then (lowest, for a minimised metric); speedup = budget /
the first epoch at which a strategy's mean incumbent over seeds reaches `random`'s mean final
value in the same run, with a 90% bootstrap interval over seeds. Across instances: the median,
10th percentile and minimum speedup (never: 0) and the instance-seeds that reached their
instance's target. The JSON (`--json`) holds per instance and strategy the final mean and sd,
the speedup and its interval, the seeds that reached the target, the median epochs to it and
seconds per study; the distribution per strategy; on LCBench with ``default`` run, issue 27's
targets for it, met or missed (bench/efficiency/targets.py; the report's last table); and the
commit, command, date, load and code versions of the run.

Kill (SIGTERM, SIGHUP) or Ctrl-C stops the run with one line and exit status 128 + the signal:
the studies finished are in `--cache`, a study cut short is not (bench/signals.py).

`--cache FILE` (JSON lines) keeps every study; a study whose key is there is not run again. The
key holds everything that changes a result: benchmark, instance, strategy and its settings,
seed, budget, metric, workers, time scale (with W > 1), storage kind and a hash of the code that
decides the strategy's result (`CODE`, with optuna's and smac's versions). `--no-reference` runs
only the strategies named (not random) into the cache; `--report-only` summarizes a cache.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import multiprocessing as mp
import os
import platform
import sys
import threading
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

REPO = Path(__file__).resolve().parents[2]

from bench.efficiency.real_path import (  # noqa: E402
    SurrogateTrial,
    hpsearch_study,
    run_hpsearch,
    study_config,
)
from bench.efficiency.stats import Run, distribution, summarize  # noqa: E402
from bench.efficiency.targets import item5, print_item5  # noqa: E402
from bench.efficiency.worker_pool import close_pool, running  # noqa: E402
from bench.signals import RunSignals, exit_with_parent  # noqa: E402
from bench.stamp import open_to_append, read_lines, unwritable, write_json  # noqa: E402

__all__ = ["HPSEARCH", "OPTUNA", "SurrogateTrial", "hpsearch_study", "main", "study_config"]

HPSEARCH: dict[str, tuple[str, dict[str, Any]]] = {
    "random": ("random", {"type": "none"}),
    "tpe": ("tpe", {"type": "none"}),
    "tpe-hyperband": ("tpe", {"type": "hyperband", "min_resource": 1, "reduction_factor": 3}),
    "random-hyperband": ("random", {"type": "hyperband", "min_resource": 1, "reduction_factor": 3}),
    "tpe-asha": ("tpe", {"type": "asha", "min_resource": 1, "reduction_factor": 3}),
    "random-asha": ("random", {"type": "asha", "min_resource": 1, "reduction_factor": 3}),
    "tpe-hyperband-promotion": (
        "tpe",
        {"type": "hyperband", "min_resource": 1, "reduction_factor": 3, "promotion": True},
    ),
}
"""hpsearch strategies: (sampler, [pruner] table)."""

OPTUNA: dict[str, tuple[str, str]] = {
    "optuna-random": ("random", "none"),
    "optuna-tpe": ("tpe", "none"),
    "optuna-tpe-hyperband": ("tpe", "hyperband"),
    "optuna-tpe-median": ("tpe", "median"),
    "optuna-random-hyperband": ("random", "hyperband"),
}
"""Plain Optuna strategies: (Optuna's sampler with its defaults, pruner)."""

SIM: dict[str, str] = {
    "sim-random-asha": "random",
    "sim-tpe-asha": "tpe-mv",
    "sim-rung-asha": "tpe-mv-rung",
    "sim-rank-asha": "tpe-mv-rank",
}

DEFAULT_STRATEGIES = (
    "default,random,tpe,tpe-hyperband,optuna-tpe-hyperband,optuna-tpe,optuna-random"
)
DEFAULT_INSTANCES = "189906,167168,189873"


def default_strategy() -> tuple[str, dict[str, Any]]:
    """README's defaults: the sampler and [pruner] of examples/digits.toml."""
    with open(REPO / "examples" / "digits.toml", "rb") as fh:
        data = tomllib.load(fh)
    return data["study"].get("sampler", "tpe"), dict(data.get("pruner", {"type": "none"}))


# -- one (instance, strategy, seed) ----------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    benchmark: str
    instance: str
    strategy: str
    seed: int
    budget: int
    workers: int
    data: str | None
    storage: str | None
    time_scale: float
    metric: str = "val_accuracy"


def _maximize(metric: str) -> bool:
    from bench.efficiency.lcbench import METRICS

    return METRICS.get(metric, True)


def _unscored(run: Run, metric: str) -> Run:
    """An in-process strategy's run (values are `Curve.score`) with the metric's own values."""
    if _maximize(metric):
        return run
    return Run([(at, -v) for at, v in run.finished], run.epochs, run.extra)


def run_job(job: Job) -> Run:
    """One study of `job.strategy` with `job.seed`. Its values are the metric's own values."""
    logging.getLogger("search").setLevel(logging.WARNING)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    started = time.monotonic()
    if job.strategy in OPTUNA or job.strategy in SIM or job.strategy == "sh-bracket":
        from bench.efficiency.lcbench import LCBench
        from bench.efficiency.sh_bracket import sh_bracket_study
        from bench.efficiency.simulate import asha_study, optuna_study

        bench = LCBench(job.instance, job.data, metric=job.metric)
        if job.strategy in OPTUNA:
            sampler, pruner = OPTUNA[job.strategy]
            run = optuna_study(bench.curve, sampler, pruner, job.budget, job.seed)
        elif job.strategy == "sh-bracket":
            run = sh_bracket_study(bench.scores_at, job.budget, job.seed)
        else:
            run = asha_study(
                bench.curve, SIM[job.strategy], job.budget, job.seed, workers=job.workers
            )
        run = _unscored(run, job.metric)
    elif job.strategy == "smac-mf":
        from bench.efficiency.smac_mf import smac_study

        out = smac_study(job.instance, job.data, job.metric, job.budget, job.seed)
        extra = {k: out[k] for k in ("trials", "configs", "shipped_epochs_total")}
        run = Run([tuple(f) for f in out["finished"]], out["epochs"], extra)  # type: ignore[misc]
        shipped = Run([tuple(f) for f in out["shipped_finished"]], job.budget)  # type: ignore[misc]
        run = _unscored(run, job.metric)
        run.extra["shipped_finished"] = _unscored(shipped, job.metric).finished
    else:
        sampler, pruner = (
            default_strategy() if job.strategy == "default" else HPSEARCH[job.strategy]
        )
        run = run_hpsearch(
            job.benchmark,
            job.instance,
            job.strategy,
            sampler,
            pruner,
            job.seed,
            job.budget,
            job.metric,
            job.workers,
            job.data,
            job.storage,
            job.time_scale,
        )
    run.extra["wall_s"] = round(time.monotonic() - started, 2)
    run.extra["load1"] = round(os.getloadavg()[0], 2)
    return run


def _run_job_quiet(job: Job) -> tuple[Job, Run]:
    import warnings

    warnings.simplefilter("ignore")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    return job, run_job(job)


# -- what decides a result: the cache key ----------------------------------------------------------

CODE: dict[str, tuple[str, ...]] = {
    "hpsearch": (
        "search/sampling",
        "search/pruning",
        "search/db/pauses.py",
        "search/db/budget.py",
        "search/worker/claiming.py",
        "search/worker/budget_and_promotion.py",
        "bench/efficiency/real_path.py",
        "bench/efficiency/lcbench.py",
        "bench/efficiency/task.py",
    ),
    "optuna": ("bench/efficiency/simulate.py", "bench/efficiency/lcbench.py"),
    "sim": ("bench/efficiency/simulate.py", "bench/efficiency/lcbench.py", "search/sampling"),
    "sh-bracket": ("bench/efficiency/sh_bracket.py", "bench/efficiency/lcbench.py"),
    "smac-mf": (
        "bench/efficiency/smac_mf.py",
        "bench/efficiency/surrogate_server.py",
        "bench/efficiency/lcbench.py",
    ),
}
"""The files that decide a strategy family's result, hashed into its cache key (with the
installed optuna's version, smac's for smac-mf, and the SIMD NumPy's float64 math uses on this
CPU where it uses any: bench/efficiency/numerics.py)."""

_CODE_HASHES: dict[str, str] = {}


def _family(strategy: str) -> str:
    if strategy in OPTUNA:
        return "optuna"  # plain Optuna: hpsearch's sampling is not used
    if strategy in SIM:
        return "sim"
    if strategy in ("sh-bracket", "smac-mf"):
        return strategy
    return "hpsearch"


def code_version(family: str) -> str:
    """A short hash of the `CODE` files of a strategy family (and the versions it runs)."""
    if family not in _CODE_HASHES:
        import hashlib

        import optuna

        from bench.efficiency.numerics import numpy_simd

        h = hashlib.sha256(f"optuna {optuna.__version__}\n".encode())
        simd = numpy_simd()  # named only where NumPy uses it: older keys stay valid elsewhere
        if simd:
            h.update(f"numpy SIMD {simd}\n".encode())
        if family == "smac-mf":
            from bench.efficiency.smac_mf import SMAC_VERSION

            h.update(f"smac {SMAC_VERSION}\n".encode())
        for entry in CODE[family]:
            root = REPO / entry
            files = sorted(root.rglob("*.py")) if root.is_dir() else [root]
            for f in files:
                if f.is_file():
                    h.update(f.relative_to(REPO).as_posix().encode() + b"\0" + f.read_bytes())
        _CODE_HASHES[family] = h.hexdigest()[:12]
    return _CODE_HASHES[family]


def strategy_settings(strategy: str) -> Any:
    """What a strategy runs with (the cache key holds it)."""
    if strategy == "default":
        sampler, pruner = default_strategy()
        return {"sampler": sampler, "pruner": pruner}
    if strategy in HPSEARCH:
        return {"sampler": HPSEARCH[strategy][0], "pruner": HPSEARCH[strategy][1]}
    if strategy in OPTUNA:
        return {"sampler": OPTUNA[strategy][0], "pruner": OPTUNA[strategy][1]}
    if strategy in SIM:
        return {"sampler": SIM[strategy]}
    if strategy == "sh-bracket":
        from bench.efficiency.sh_bracket import ETA, N_CONFIGS, RUNGS

        return {"configs": N_CONFIGS, "rungs": list(RUNGS), "eta": ETA}
    return {"facade": "MultiFidelityFacade", "eta": 3, "min_budget": 1, "charge": "resumed"}


def _cache_key(job: Job) -> str:
    """Everything that changes the result of `job`, as one JSON string."""
    storage = "sqlite" if not job.storage else job.storage.split(":", 1)[0].split("+")[0]
    key = {
        "benchmark": job.benchmark,
        "instance": job.instance,
        "strategy": job.strategy,
        "settings": strategy_settings(job.strategy),
        "seed": job.seed,
        "budget": job.budget,
        "metric": job.metric,
        "workers": job.workers,
        "time_scale": job.time_scale if job.workers > 1 else 0,
        "storage": storage if _family(job.strategy) == "hpsearch" else None,
        "code": code_version(_family(job.strategy)),
    }
    return json.dumps(key, sort_keys=True)


def _read_cache(path: str | None) -> dict[str, Run]:
    """The cached studies by key (`bench.stamp.read_lines`: a line cut short is left out)."""
    out: dict[str, Run] = {}
    for row in read_lines(path) if path else []:
        try:
            out[row["key"]] = Run([tuple(f) for f in row["finished"]], row["epochs"], row["extra"])
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{path}: a row without its study ({exc!r})") from exc
    return out


def _json_path(args: argparse.Namespace) -> Path:
    return Path(args.json or REPO / "bench" / "results" / f"efficiency-{args.benchmark}.json")


_STAMP: dict[str, str] = {}


def _append_cache(path: str | None, job: Job, run: Run) -> None:
    """One line: the key, the study's finished trials and epochs, its extras (seconds, load at
    its end, ...) and the commit and date that made it."""
    if path:
        if not _STAMP:
            _STAMP["commit"] = _commit()
        row = {"key": _cache_key(job), "finished": run.finished, "epochs": run.epochs}
        stamp = {**_STAMP, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        with open_to_append(path) as fh:
            fh.write(json.dumps({**row, "extra": run.extra, "stamp": stamp}) + "\n")


# -- the whole benchmark -------------------------------------------------------------------------

DEV_INSTANCES = [
    "126026",
    "126029",
    "146212",
    "167152",
    "167168",
    "167181",
    "167185",
    "167190",
    "167200",
    "167201",
    "168329",
    "168331",
    "168908",
    "189354",
    "189862",
    "189865",
    "189873",
    "189905",
    "189906",
    "189908",
    "189909",
    "34539",
    "3945",
    "7593",
]
"""LCBench's development instances (issue 27): every choice is made on these. The other ten
are the held-out test set, measured by others: do not run them."""

SUITES: dict[str, list[str]] = {"dev": DEV_INSTANCES}
SUITE_SEEDS = 5
NAMED = ("189906", "167168", "189873", "3945", "7593")
NAMED_SEEDS = 10
"""`--suite` without `--seeds`: 5 seeds an instance, 10 on the five named in issue 27."""

PEERS = ("sh-bracket", "smac-mf")
SHIPPED = "smac-mf-shipped"
"""smac-mf's studies charged as shipped (every run pays all its epochs): a row of the tables,
not a strategy of its own."""


class _Parser(argparse.ArgumentParser):
    """A flag argparse cannot read (a number that is none, an unknown flag) is bad input like
    the others: one line, exit 2 (argparse's own prints its usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"bench.efficiency: {message} (see python -m bench.efficiency --help)\n")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = _Parser(prog="python -m bench.efficiency", description=__doc__.split("\n")[0])
    parser.add_argument("--benchmark", choices=("lcbench", "digits"), default="lcbench")
    parser.add_argument(
        "--instances", default=None, help=f"LCBench OpenML task ids (default {DEFAULT_INSTANCES})"
    )
    parser.add_argument(
        "--suite", default=None, help=f"a set of instances: {', '.join(SUITES)} (24 instances)"
    )
    parser.add_argument("--strategies", default=None, help=f"default: {DEFAULT_STRATEGIES}")
    parser.add_argument(
        "--seeds",
        type=int,
        default=None,
        help="seeds 0..N-1 of every strategy (default 10; --suite: 5, 10 on the named five)",
    )
    parser.add_argument(
        "--budget-epochs", type=int, default=None, help="default 5000 (digits 1350)"
    )
    parser.add_argument(
        "--metric",
        default="val_accuracy",
        help="lcbench: val_accuracy, val_balanced_accuracy or val_cross_entropy (minimised)",
    )
    parser.add_argument("--workers", type=int, default=1, help="hpsearch workers per study")
    parser.add_argument("--json", default=None, help="default: bench/efficiency-BENCHMARK.json")
    parser.add_argument(
        "--data",
        default=None,
        help="YAHPO data (default $YAHPO_DATA, else ../shared/bench-data/yahpo_data)",
    )
    parser.add_argument("--storage", default=None, help="default: SQLite in a temporary directory")
    parser.add_argument(
        "--cache",
        default=None,
        help="a JSON-lines file: every finished study is appended; studies found there are "
        "not run again (an interrupted run resumes; --report-only summarizes it)",
    )
    parser.add_argument("--report-only", action="store_true", help="only summarize --cache")
    parser.add_argument(
        "--reference",
        default=None,
        help="a JSON of this script: its random's mean final is the target (random not rerun)",
    )
    parser.add_argument(
        "--no-reference",
        action="store_true",
        help="run only the strategies named, not random (their studies go to --cache: "
        "summarize them with random's there by --report-only)",
    )
    parser.add_argument("--time-scale", type=float, default=1 / 500, help="with --workers > 1")
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="studies run at once (default: CPUs; with --workers > 1 only 1)",
    )
    args = parser.parse_args(argv)
    return args


def _bad_numbers(args: argparse.Namespace) -> str | None:
    """What is wrong with the numeric flags, in one line (None: nothing)."""
    for flag, value in (
        ("--seeds", args.seeds),
        ("--budget-epochs", args.budget_epochs),
        ("--workers", args.workers),
        ("--jobs", args.jobs),
    ):
        if value is not None and value < 1:
            return f"{flag}: must be at least 1, got {value}"
    if args.jobs is not None and args.jobs > 1 and args.workers > 1:
        # Each study of W workers is W processes already, which a study run in a pool's
        # (daemonic) process may not start; and studies side by side would share the CPUs
        # that `--time-scale` assumes are the workers'.
        return (
            f"--jobs: studies of --workers {args.workers} run one at a time, "
            f"got --jobs {args.jobs} (leave --jobs out)"
        )
    if not math.isfinite(args.time_scale) or not args.time_scale > 0:
        return f"--time-scale: must be a finite number above 0, got {args.time_scale}"
    from bench.efficiency.real_path import full_training

    full = full_training(args.benchmark)
    if args.budget_epochs is not None and args.budget_epochs < full:
        return (
            f"--budget-epochs: {args.budget_epochs} is less than one full training "
            f"({full} epochs on {args.benchmark}): no trial could finish"
        )
    return None


def _bad_choices(args: argparse.Namespace) -> str | None:
    """What is wrong with --suite, --instances and --metric, in one line (None: nothing)."""
    from bench.efficiency.lcbench import METRICS

    if args.suite is not None and args.suite not in SUITES:
        return f"--suite: unknown suite {args.suite!r} (known: {', '.join(SUITES)})"
    if args.suite is not None and args.instances is not None:
        return "--suite and --instances: give one of them"
    if args.benchmark == "digits" and (args.suite or args.instances):
        return "--suite/--instances: only for --benchmark lcbench"
    if args.metric not in METRICS:
        return f"--metric: unknown metric {args.metric!r} (one of {', '.join(METRICS)})"
    if args.benchmark == "digits" and args.metric != "val_accuracy":
        return "--metric: digits is scored by val_accuracy only"
    if args.instances is not None and not all(i.strip() for i in args.instances.split(",")):
        return f"--instances: an empty instance id in {args.instances!r}"
    return None


def _seeds_of(instance: str, args: argparse.Namespace) -> int:
    if args.seeds is not None:
        return int(args.seeds)
    if args.suite is not None:
        return NAMED_SEEDS if instance in NAMED else SUITE_SEEDS
    return 10


def _git(*cmd: str) -> str:
    import subprocess

    try:
        done = subprocess.run(
            ["git", *cmd], cwd=REPO, capture_output=True, text=True, timeout=30, check=False
        )
    except OSError:
        return ""
    return done.stdout.strip()


def _commit() -> str:
    """HEAD's short hash, with +dirty when tracked files differ from it."""
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    return _git("rev-parse", "--short=12", "HEAD") + ("+dirty" if dirty else "")


def _uptime() -> str:
    with open("/proc/loadavg") as fh:
        one, five, fifteen = fh.read().split()[:3]
    return f"load average: {one}, {five}, {fifteen}"


def _final(run: Run, maximize: bool) -> float | None:
    """The run's best fully trained value in the metric's direction (None: it trained none)."""
    values = [v for _, v in run.finished]
    if not values:
        return None
    return max(values) if maximize else min(values)


def _fmt_final(s: dict[str, Any]) -> str:
    """A strategy's final mean (sd), or how many seeds trained no trial fully."""
    if s["final_mean"] is None:
        return f"- ({s['seeds_without_final']} seed(s) trained no trial fully)"
    return f"{s['final_mean']:.4g} ({s['final_sd']:.2g})"


def _fmt_speedup(x: float | None) -> str:
    return f"{x:.1f}x" if x else "never"


def bad_input(message: str, harness: str = "bench.efficiency") -> int:
    """Say what is wrong in one line, as the harness is run (`python -m bench.efficiency`,
    or `harness`); the exit status of bad input."""
    print(f"{harness}: {message}", file=sys.stderr)
    return 2


def _end_children(pool: Any) -> None:
    """Ctrl-C, kill, a failed study: the studies still running end now, by SIGKILL (their
    Workers would take SIGTERM as a spot machine's notice, hand their trial back and, in the
    processes of `--workers W`, wait for the next study for ever).

    A pool process killed while idle can die holding the pool's queue lock, and the pool's
    exit handler (`terminate`) then waited on that lock for ever (seen when --cache could not
    be written). So `terminate` runs here, in a thread given 5 s: it runs once, and the exit
    no longer waits for it."""
    for child in mp.active_children():
        child.kill()
    if pool is not None:
        ending = threading.Thread(target=pool.terminate, daemon=True)
        ending.start()
        ending.join(timeout=5)


def _kill_study_workers() -> None:
    """The processes of `--workers W` go first on kill or Ctrl-C: unwinding ends a study's
    `with TemporaryDirectory()` (bench/efficiency/real_path.py) before `_end_children` kills
    them, and a worker that opened its epoch log in between died with a traceback (seen in
    CI). The pool of `--jobs` is left to `_end_children`, whose lock it minds."""
    for process in running():
        process.kill()


def main(argv: list[str] | None = None) -> int:
    signals = RunSignals(first=_kill_study_workers)
    try:
        return _main(argv, signals)
    finally:
        signals.close()


def _main(argv: list[str] | None, signals: RunSignals) -> int:
    args = parse_args(argv)
    wrong = _bad_numbers(args) or _bad_choices(args)
    if not wrong:
        wrong = unwritable("--json", _json_path(args))
    if not wrong and args.cache and not args.report_only:
        wrong = unwritable("--cache", args.cache)
    if wrong:
        return bad_input(wrong)
    digits = args.benchmark == "digits"
    budget = args.budget_epochs or (1350 if digits else 5000)
    maximize = True if digits else _maximize(args.metric)
    strategies = (
        args.strategies or ("default,random,tpe,tpe-hyperband" if digits else DEFAULT_STRATEGIES)
    ).split(",")
    known = {"default", *HPSEARCH, *OPTUNA, *SIM, *PEERS}
    in_process = set(OPTUNA) | set(SIM) | set(PEERS)
    bad = [s for s in strategies if s not in known]
    if bad or (digits and any(s in in_process for s in strategies)):
        return bad_input(
            f"--strategies: unknown or not for {args.benchmark}: {', '.join(bad or strategies)}"
        )
    try:
        reference = json.loads(Path(args.reference).read_text()) if args.reference else None
    except (OSError, ValueError) as exc:
        return bad_input(f"--reference: cannot read {args.reference}: {exc}")
    if "random" not in strategies and reference is None and not args.no_reference:
        strategies.insert(0, "random")  # the reference
    if digits:
        instances = ["digits"]
    elif args.suite:
        instances = list(SUITES[args.suite])
    else:
        instances = (args.instances or DEFAULT_INSTANCES).split(",")
    data = args.data or os.environ.get("YAHPO_DATA")
    if not digits and not args.report_only:
        from bench.efficiency.lcbench import LCBench, default_data_dir

        data = data or str(default_data_dir())
        try:
            known_instances = LCBench(instances[0], data)._bench.instances
        except (FileNotFoundError, ValueError, ImportError) as exc:
            return bad_input(str(exc))
        unknown = [i for i in instances if i not in known_instances]
        if unknown:
            return bad_input(f"unknown LCBench instance {unknown[0]!r}")
    if "smac-mf" in strategies and not args.report_only:
        from bench.efficiency.smac_mf import SmacUnavailable, ensure_venv

        try:
            ensure_venv()
        except SmacUnavailable as exc:
            return bad_input(f"smac-mf: {exc}")
    seeds = {instance: _seeds_of(instance, args) for instance in instances}
    jobs = [
        Job(
            args.benchmark,
            instance,
            strategy,
            seed,
            budget,
            args.workers,
            data,
            args.storage,
            args.time_scale,
            args.metric,
        )
        # Seed by seed: an interrupted run has as many seeds of every strategy (--cache).
        for seed in range(max(seeds.values()))
        for instance in instances
        if seed < seeds[instance]
        for strategy in strategies
    ]
    n_jobs = args.jobs or (1 if args.workers > 1 or args.storage else os.cpu_count() or 1)
    started = time.monotonic()
    load_before = _uptime()
    results: dict[tuple[str, str], list[Run]] = {}
    try:
        cached = _read_cache(args.cache)
    except (OSError, ValueError) as exc:
        return bad_input(f"--cache: {exc}")
    todo = []
    for job in jobs:
        run = cached.get(_cache_key(job))
        if run is not None:
            run.extra.setdefault("seed", job.seed)
            results.setdefault((job.instance, job.strategy), []).append(run)
        elif not args.report_only:
            todo.append(job)
    if args.storage and any(_family(job.strategy) == "hpsearch" for job in todo):
        from search.db.storage import StorageError, open_storage

        try:  # a missing database: one line, before any study that needs it starts
            open_storage(args.storage).close()
        except StorageError as exc:
            return bad_input(f"--storage: {exc}")
    if args.report_only:
        strategies = [s for s in strategies if any((i, s) in results for i in instances)]
        left_out = [i for i in instances if (i, "random") not in results and not reference]
        if left_out and len(left_out) == len(instances):
            return bad_input(
                f"--report-only: no cached study of random search (the reference) for "
                f"{', '.join(left_out)} in {args.cache}"
            )
        if left_out:
            print(f"left out, no cached random search: {', '.join(left_out)}", file=sys.stderr)
        instances = [i for i in instances if i not in left_out]
    # Its processes end with the runner, SIGKILL too (bench.signals.exit_with_parent).
    pool = mp.get_context("spawn").Pool(n_jobs, exit_with_parent) if n_jobs > 1 and todo else None
    done = 0
    try:
        mapped = pool.imap_unordered(_run_job_quiet, todo) if pool else map(_run_job_quiet, todo)
        for i, (job, run) in enumerate(mapped, start=1):
            if signals.check() is not None:
                raise SystemExit(128 + signals.received)  # cut short: not cached
            done = i
            run.extra["seed"] = job.seed
            results.setdefault((job.instance, job.strategy), []).append(run)
            _append_cache(args.cache, job, run)
            final = _final(run, maximize)
            print(
                f"[{i}/{len(todo)}] {job.instance} {job.strategy} seed {job.seed}: final "
                f"{'none' if final is None else f'{final:.4g}'}, {run.epochs} epochs, "
                f"{run.extra.get('trials')} trials, {run.extra['wall_s']:.1f} s",
                file=sys.stderr,
                flush=True,
            )
    except BaseException:
        _end_children(pool)
        kept = f"kept in {args.cache}" if args.cache else "not kept (no --cache)"
        signals.stopped(
            "bench.efficiency",
            f"{done} of {len(todo)} studies finished, {kept}; any study still running was cut "
            "short and left out",
        )
        raise
    if pool:
        pool.close()
        pool.join()
    close_pool()
    if "smac-mf" in strategies:  # the same studies, charged as shipped
        strategies.insert(strategies.index("smac-mf") + 1, SHIPPED)
        for instance in instances:
            runs = results.get((instance, "smac-mf"), [])
            results[(instance, SHIPPED)] = [
                Run([tuple(f) for f in r.extra.get("shipped_finished", [])], budget, r.extra)  # type: ignore[misc]
                for r in runs
            ]
    elapsed = time.monotonic() - started
    command = " ".join(
        ["python -m bench.efficiency", *(argv if argv is not None else sys.argv[1:])]
    )
    out: dict[str, Any] = {
        "command": command,
        "commit": _commit(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "benchmark": args.benchmark,
        "suite": args.suite,
        "metric": "val_accuracy" if digits else args.metric,
        "maximize": maximize,
        "budget_epochs": budget,
        "seeds": seeds,
        "workers": args.workers,
        "time_scale": args.time_scale if args.workers > 1 else 0,
        "jobs": n_jobs,
        "default_strategy": dict(zip(("sampler", "pruner"), default_strategy(), strict=True)),
        "code_versions": {f: code_version(f) for f in {_family(s) for s in strategies}},
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "load": {"before": load_before, "after": _uptime()},
        "elapsed_s": round(elapsed, 1),
        "studies_run": len(todo),
        "seconds_per_study": {},
        "instances": {},
        "distribution": {},
    }
    for strategy in strategies:
        walls = [
            r.extra["wall_s"]
            for i in instances
            for r in results.get((i, strategy), [])
            if "wall_s" in r.extra
        ]
        if walls and strategy != SHIPPED:
            out["seconds_per_study"][strategy] = round(sum(walls) / len(walls), 2)
    direction = "maximised" if maximize else "minimised"
    print(
        f"\n{args.benchmark}, {out['metric']} ({direction}), budget {budget} epochs, "
        f"seeds {min(seeds.values())}-{max(seeds.values())}, {args.workers} worker(s), "
        f"{elapsed / 60:.1f} min, {len(todo)} studies run; {out['load']['after']}"
    )
    per_strategy: dict[str, list[dict[str, Any]]] = {}
    for instance in instances:
        if reference is not None:
            target = reference["instances"][instance]["target"]
            where = f"random's mean final in {args.reference}"
        else:
            if not results.get((instance, "random")):
                continue
            worst = -math.inf if maximize else math.inf
            randoms = results[(instance, "random")]
            target = summarize(randoms, budget, worst, maximize=maximize)["final_mean"]
            where = "random's mean final"
        table = {}
        print(f"\n{instance}: target {target:.4g} ({where})\n")
        print(
            "| strategy | final mean (sd) | speedup | 90% CI | seeds reached "
            "| median epochs to target | trials | s/study |"
        )
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for strategy in strategies:
            runs = results.get((instance, strategy))
            if not runs:
                continue
            s = summarize(runs, budget, target, maximize=maximize)
            s["trials_mean"] = sum(r.extra.get("trials", 0) for r in runs) / len(runs)
            s["finals"] = [_final(r, maximize) for r in runs]
            s["seed_list"] = sorted(r.extra.get("seed", -1) for r in runs)
            walls = [r.extra["wall_s"] for r in runs if "wall_s" in r.extra]
            s["seconds_per_study"] = round(sum(walls) / len(walls), 2) if walls else None
            table[strategy] = s
            per_strategy.setdefault(strategy, []).append(s)
            lo, hi = s["speedup_ci90"]
            med = s["median_epochs_to_target"]
            print(
                f"| {strategy} | {_fmt_final(s)} "
                f"| {_fmt_speedup(s['speedup'])} | {lo:.1f}-{hi:.1f} "
                f"| {s['seeds_reached']}/{s['seeds']} | {med if med is not None else '-'} "
                f"| {s['trials_mean']:.0f} | {s['seconds_per_study'] or 0:.1f} |"
            )
        out["instances"][instance] = {"target": target, "target_from": where, "strategies": table}
    print(f"\nacross instances ({len(out['instances'])}): speedup to random's mean final\n")
    print(
        "| strategy | instances | median | 10th pct | min | instances reached "
        "| instance-seeds reached | s/study |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for strategy in strategies:
        if strategy not in per_strategy:
            continue
        d = distribution(per_strategy[strategy])
        out["distribution"][strategy] = d
        print(
            f"| {strategy} | {d['instances']} | {_fmt_speedup(d['speedup_median'])} "
            f"| {_fmt_speedup(d['speedup_p10'])} | {_fmt_speedup(d['speedup_min'])} "
            f"| {d['instances_reached']}/{d['instances']} "
            f"| {d['instance_seeds_reached']}/{d['instance_seeds']} "
            f"({100 * (d['reached_share'] or 0):.0f}%) "
            f"| {out['seconds_per_study'].get(strategy, 0):.1f} |"
        )
    if args.benchmark == "lcbench" and "default" in strategies:
        rows = item5(out["instances"], out["metric"], maximize, budget)
        out["targets"] = {"strategy": "default", "rows": rows}
        print_item5(rows, "default")
    path = _json_path(args)
    write_json(path, out)
    print(f"\nwritten {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
