"""Search efficiency at equal compute: epochs until a strategy finds what random search finds.

    python -m bench.efficiency                                  # lcbench, 3 instances, 10 seeds
    python -m bench.efficiency --instances 189906 --seeds 3 --strategies random,default
    python -m bench.efficiency --workers 8 --strategies random,default
    python -m bench.efficiency --benchmark digits --budget-epochs 1350 --seeds 5

Benchmarks:

- ``lcbench``: YAHPO Gym's surrogate of LCBench (bench/efficiency/lcbench.py; `pip install -e
'.[bench]'`,
  data in `--data`, default `$YAHPO_DATA`, else ../shared/bench-data/yahpo_data next to the
  repository). A trial "trains" 50 epochs; epoch e's score is the surrogate's validation accuracy.
- ``digits``: real training of bench/efficiency/task.py (an MLP on 600 digits images), 27 epochs
  a trial, through hpsearch's own trainer.

Every study has a budget of `--budget-epochs` trained epochs (every epoch counts, pruned and
paused trials' too). Strategies:

- hpsearch's, run through its real path: `Worker`s (one in this process, or `--workers W`
  processes) claiming trials from the study in the database (SQLite in a temporary directory, or
  `--storage`), sampling and pruning as a study does; for lcbench the trial function
  (`SurrogateTrial`) reports the surrogate's curve in place of training. With W > 1 an epoch
  lasts the surrogate's recorded runtime for that configuration and epoch times `--time-scale`
  (default 1/500), so trials end in a realistic order. Names: ``default`` (the sampler and
  pruner of examples/digits.toml, README's defaults), ``random`` (no pruning: the reference),
  ``tpe``, ``tpe-hyperband``, ``random-hyperband``, ``tpe-asha``, ``random-asha``,
  ``tpe-hyperband-promotion``.
- plain Optuna 5.0, in this process (bench/efficiency/simulate.py; lcbench only):
  ``optuna-random``, ``optuna-tpe`` (no pruning), ``optuna-tpe-hyperband`` (min 1, eta 3),
  ``optuna-tpe-median``, ``optuna-random-hyperband``.
- ``sim-*``: promotion ASHA simulated in this process on a simulated clock with a real Optuna
  sampler (bench/efficiency/simulate.py), to explore settings quickly: ``sim-random-asha``,
  ``sim-tpe-asha`` (TPE seeing paused trials as running), ``sim-rung-asha`` and
  ``sim-rank-asha`` (TPE behind search/sampling/multifidelity.py).

The measure (bench/efficiency/stats.py): a study's incumbent at epoch e is its best fully
trained trial (all epochs) finished by then; speedup = budget / the first epoch at which a
strategy's mean incumbent over seeds reaches `random`'s mean final value in the same run, with a
90% bootstrap interval over seeds. The JSON (`--json`) holds per instance and strategy the final
mean and sd, the speedup and its interval, the seeds that reached the target and the median
epochs to it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import multiprocessing as mp
import os
import platform
import sys
import tempfile
import time
import tomllib
import uuid
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

from bench.efficiency.stats import Run, summarize  # noqa: E402
from bench.stamp import append_line, write_json  # noqa: E402

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
DIGITS_EPOCHS = 27


def default_strategy() -> tuple[str, dict[str, Any]]:
    """README's defaults: the sampler and [pruner] of examples/digits.toml."""
    with open(REPO / "examples" / "digits.toml", "rb") as fh:
        data = tomllib.load(fh)
    return data["study"].get("sampler", "tpe"), dict(data.get("pruner", {"type": "none"}))


def has_epoch_budget() -> bool:
    """Whether this hpsearch has `[study] budget_epochs` (issue 20's budgets)."""
    from search.study.config import StudySettings

    return any(f.name == "budget_epochs" for f in fields(StudySettings))


def study_config(
    name: str, sampler: str, pruner: dict[str, Any], seed: int, budget: int, benchmark: str
) -> Any:
    """The hpsearch config of one study of the benchmark."""
    from search.study.config import parse_config

    if benchmark == "lcbench":
        from bench.efficiency.lcbench import EPOCHS, SPACE

        task = {"name": "bench.efficiency.task:make_task", "epochs": EPOCHS}
        space = SPACE
    else:
        task = {"name": "bench.efficiency.task:make_task", "epochs": DIGITS_EPOCHS}
        space = {
            "lr": {"type": "float", "low": 1e-5, "high": 1.0, "log": True},
            "weight_decay": {"type": "float", "low": 1e-6, "high": 1e-1, "log": True},
            "width": {"type": "int", "low": 8, "high": 128, "log": True},
            "dropout": {"type": "float", "low": 0.0, "high": 0.5},
        }
    study: dict[str, Any] = {
        "name": name,
        "direction": "maximize",
        "metric": "val_accuracy",
        "sampler": sampler,
        "seed": seed,
    }
    if has_epoch_budget():
        study["budget_epochs"] = budget
    else:
        study["n_trials"] = budget  # at least an epoch a trial; the bench counts the epochs
    return parse_config({"study": study, "pruner": pruner, "task": task, "space": space})


# -- the surrogate trial, through hpsearch's real path -------------------------------------------


class EpochLog:
    """What the trial functions of one study did, in the order it happened (CLOCK_MONOTONIC is
    one clock for every process of the machine): every epoch trained, every trial trained to
    the end (with its value). Appended to a file, one line per event, by every process."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fh: Any = None

    def epoch(self, number: int, epoch: int) -> None:
        self._write(f"e {time.monotonic():.6f} {number} {epoch}\n")

    def done(self, number: int, value: float) -> None:
        self._write(f"d {time.monotonic():.6f} {number} {value!r}\n")

    def _write(self, line: str) -> None:
        if self._fh is None:
            self._fh = open(self.path, "a", buffering=1)  # noqa: SIM115 (closed by close())
        self._fh.write(line)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def run(self) -> Run:
        """The study as a `Run`: fully trained trials at the cumulative epochs of their end."""
        events = []
        with open(self.path) as fh:
            for line in fh:
                kind, t, number, rest = line.split()
                events.append((float(t), 0 if kind == "e" else 1, kind, int(number), rest))
        events.sort()
        epochs, finished = 0, []
        for _, _, kind, _, rest in events:
            if kind == "e":
                epochs += 1
            else:
                finished.append((epochs, float(rest)))
        return Run(finished, epochs)


class Budget:
    """Epochs left to a study, when hpsearch has no `budget_epochs` to end it: shared by the
    processes of one study (a multiprocessing value), spent an epoch at a time."""

    def __init__(self, left: Any) -> None:
        self.left = left

    def take(self) -> bool:
        with self.left.get_lock():
            if self.left.value <= 0:
                return False
            self.left.value -= 1
            return True


@dataclass
class SurrogateTrial:
    """The trial function of a worker on lcbench: reports the surrogate's curve for the
    trial's params, from the epoch after its last report (a resumed or promoted trial) on; each
    epoch lasts the surrogate's recorded runtime times `time_scale` (0: no wait)."""

    instance: str
    data: str | None
    time_scale: float
    log: EpochLog
    budget: Budget | None = None
    stop_worker: Callable[[], None] | None = None

    def __post_init__(self) -> None:
        from bench.efficiency.lcbench import LCBench

        self.bench = LCBench(self.instance, self.data)

    def __call__(self, run: Any) -> Any:
        from search.worker.trial_run import TrialOutcome

        curve = self.bench.curve(run.params)
        epochs = run.config.task.epochs
        value = run.reported[max(run.reported)] if run.reported else None
        for epoch in range(max(run.reported, default=0) + 1, epochs + 1):
            if self.budget is not None and not self.budget.take():
                if self.stop_worker is not None:
                    self.stop_worker()
                return TrialOutcome(status="pruned", value=value)
            if self.time_scale > 0:
                time.sleep(curve.seconds[epoch - 1] * self.time_scale)
            value = curve.accuracy[epoch - 1]
            self.log.epoch(run.number, epoch)
            if run.report(epoch, value):
                return TrialOutcome(status="pruned", value=value)
            if run.stop.is_set():
                return TrialOutcome(status="preempted")
        self.log.done(run.number, value)  # type: ignore[arg-type]
        return TrialOutcome(status="completed", value=value, user_attrs={"epochs_trained": epochs})


class DigitsTrial:
    """The trial function of a worker on digits: hpsearch's own training, with every epoch it
    trains and every trial it finishes written to the log (through the report)."""

    def __init__(self, log: EpochLog, budget: Budget | None, stop_worker: Callable[[], None]):
        self.log, self.budget, self.stop_worker = log, budget, stop_worker

    def __call__(self, run: Any) -> Any:
        from search.worker.training import run_training

        inner = run.report
        last: dict[str, Any] = {}
        before = set(run.reported)  # a resumed run re-reports the epoch it resumes after

        def report(epoch: int, value: float) -> bool:
            if epoch in before:
                return inner(epoch, value)
            if self.budget is not None and not self.budget.take():
                self.stop_worker()
                return True
            self.log.epoch(run.number, epoch)
            last["epoch"], last["value"] = epoch, value
            return inner(epoch, value)

        run.report = report
        outcome = run_training(run)
        if outcome.status == "completed" and last.get("epoch") == run.config.task.epochs:
            self.log.done(run.number, last["value"])
        return outcome


def _pool_process(tasks: Any, done: Any, left: Any) -> None:
    """A worker process of `WorkerPool`: runs one Worker per study it is handed."""
    import warnings

    warnings.simplefilter("ignore")
    logging.basicConfig(level=logging.WARNING)
    while True:
        task = tasks.get()
        if task is None:
            return
        try:
            code = _run_worker(*task, left if task[-1] is not None else None)
        except Exception as exc:  # reported to the parent, which stops the benchmark
            code = f"{type(exc).__name__}: {exc}"
        done.put(code)


class WorkerPool:
    """W long-lived processes that join each study together: each runs a `Worker` of its own
    (a real one: its own database connections, sampling and pruning), so that the start-up of
    a process (imports, ~2 s of CPU) is paid once per benchmark, not once per study."""

    def __init__(self, workers: int) -> None:
        ctx = mp.get_context("spawn")
        self.workers = workers
        self.tasks, self.done = ctx.Queue(), ctx.Queue()
        self.left = ctx.Value("l", 0)
        self.procs = [
            ctx.Process(target=_pool_process, args=(self.tasks, self.done, self.left), daemon=True)
            for _ in range(workers)
        ]
        for p in self.procs:
            p.start()

    def run(self, task: tuple[Any, ...], budget: int | None) -> list[Any]:
        """Run every process's Worker on one study; their exit codes."""
        if budget is not None:
            self.left.value = budget
        for _ in range(self.workers):
            self.tasks.put((*task, budget))
        return [self.done.get() for _ in range(self.workers)]

    def close(self) -> None:
        for _ in self.procs:
            self.tasks.put(None)
        for p in self.procs:
            p.join(timeout=30)


_POOL: WorkerPool | None = None


def _run_worker(
    url: str,
    study: str,
    benchmark: str,
    instance: str,
    data: str | None,
    time_scale: float,
    log_path: str,
    budget_left: int | None,
    left: Any = None,
) -> int:
    from search.db.storage import open_storage
    from search.study.studies import open_study
    from search.worker.loop import Worker

    storage = open_storage(url)
    log = EpochLog(log_path)
    holder: list[Any] = []
    if left is None and budget_left is not None:
        left = mp.get_context("fork").Value("l", budget_left)
    budget = Budget(left) if left is not None else None

    def stop_worker() -> None:
        holder[0]._stop.set()  # the bench's own budget is spent (hpsearch without budget_epochs)

    if benchmark == "lcbench":
        trial: Any = SurrogateTrial(instance, data, time_scale, log, budget, stop_worker)
    else:
        trial = DigitsTrial(log, budget, stop_worker)
    worker = Worker(
        storage, open_study(storage, study), run_trial=trial, grace_s=60, progress=False
    )
    holder.append(worker)
    try:
        return worker.run()
    finally:
        log.close()
        storage.close()


def hpsearch_study(
    url: str,
    config: Any,
    benchmark: str,
    instance: str,
    data: str | None,
    workers: int,
    time_scale: float,
    tmp: str,
) -> Run:
    """One hpsearch study on `url`: created as `hpsearch create` does, run by `workers`
    workers (this process's own thread when 1) until it is done."""
    from search.db.storage import open_storage
    from search.sampling.setup import set_up_study

    storage = open_storage(url, create=True)
    if storage.is_postgres:
        from search.db.migrate import upgrade

        upgrade(storage)  # the benchmark's own database: it is its admin
    set_up_study(storage, config, ["bench/efficiency/runner.py"])
    storage.close()
    log_path = os.path.join(tmp, f"{config.study.name}.log")
    budget = None if has_epoch_budget() else config.study.n_trials  # the bench's own count
    started = time.monotonic()
    args = (url, config.study.name, benchmark, instance, data, time_scale, log_path)
    if workers == 1:
        codes: list[Any] = [_run_worker(*args, budget)]
    else:
        global _POOL
        if _POOL is None or _POOL.workers != workers:
            _POOL = WorkerPool(workers)
        codes = _POOL.run(args, budget)
    if any(c != 0 for c in codes):
        raise RuntimeError(f"study {config.study.name}: worker exit codes {codes}")
    run = EpochLog(log_path).run()
    run.extra["wall_s"] = time.monotonic() - started
    run.extra["trials"] = _trial_count(url, config.study.name)
    return run


def _trial_count(url: str, name: str) -> int:
    import optuna

    from search.db.storage import open_storage

    storage = open_storage(url)
    try:
        study = optuna.load_study(study_name=name, storage=storage.optuna_storage())
        return len(study.get_trials(deepcopy=False))
    finally:
        storage.close()


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


def run_job(job: Job) -> Run:
    """One study of `job.strategy` with `job.seed`."""
    logging.getLogger("search").setLevel(logging.WARNING)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    started = time.monotonic()
    if job.strategy in OPTUNA or job.strategy in SIM:
        from bench.efficiency.lcbench import LCBench
        from bench.efficiency.simulate import asha_study, optuna_study

        bench = LCBench(job.instance, job.data)
        if job.strategy in OPTUNA:
            sampler, pruner = OPTUNA[job.strategy]
            run = optuna_study(bench.curve, sampler, pruner, job.budget, job.seed)
        else:
            run = asha_study(
                bench.curve, SIM[job.strategy], job.budget, job.seed, workers=job.workers
            )
    else:
        sampler, pruner = (
            default_strategy() if job.strategy == "default" else HPSEARCH[job.strategy]
        )
        name = f"eff-{job.instance}-{job.strategy}-{job.seed}-{uuid.uuid4().hex[:6]}"
        config = study_config(name, sampler, pruner, job.seed, job.budget, job.benchmark)
        with tempfile.TemporaryDirectory() as tmp:
            url = job.storage or f"sqlite:///{tmp}/efficiency.db"
            scale = job.time_scale if job.workers > 1 else 0.0
            run = hpsearch_study(
                url, config, job.benchmark, job.instance, job.data, job.workers, scale, tmp
            )
    run.extra["wall_s"] = round(time.monotonic() - started, 2)
    return run


def _run_job_quiet(job: Job) -> tuple[Job, Run]:
    import warnings

    warnings.simplefilter("ignore")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    return job, run_job(job)


# -- the whole benchmark -------------------------------------------------------------------------


def _cache_key(job: Job) -> str:
    return f"{job.benchmark}/{job.instance}/{job.strategy}/{job.seed}/{job.budget}/{job.workers}"


def _read_cache(path: str | None) -> dict[str, Run]:
    out: dict[str, Run] = {}
    if path and os.path.exists(path):
        with open(path) as fh:
            for line in fh:
                row = json.loads(line)
                run = Run([tuple(f) for f in row["finished"]], row["epochs"], row["extra"])
                out[row["key"]] = run
    return out


def _append_cache(path: str | None, job: Job, run: Run) -> None:
    if path:
        row = {"key": _cache_key(job), "finished": run.finished, "epochs": run.epochs}
        with open(path, "a") as fh:
            append_line(fh, {**row, "extra": run.extra})


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--benchmark", choices=("lcbench", "digits"), default="lcbench")
    parser.add_argument("--instances", default=DEFAULT_INSTANCES, help="LCBench OpenML task ids")
    parser.add_argument("--strategies", default=None, help=f"default: {DEFAULT_STRATEGIES}")
    parser.add_argument("--seeds", type=int, default=10, help="seeds 0..N-1 of every strategy")
    parser.add_argument(
        "--budget-epochs", type=int, default=None, help="default 5000 (digits 1350)"
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
    parser.add_argument("--time-scale", type=float, default=1 / 500, help="with --workers > 1")
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="studies run at once (default: CPUs, or 1 with --workers > 1)",
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
    if not args.time_scale > 0:
        return f"--time-scale: must be above 0, got {args.time_scale}"
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    wrong = _bad_numbers(args)
    if wrong:
        print(f"efficiency.py: {wrong}", file=sys.stderr)
        return 2
    digits = args.benchmark == "digits"
    budget = args.budget_epochs or (1350 if digits else 5000)
    strategies = (
        args.strategies or ("default,random,tpe,tpe-hyperband" if digits else DEFAULT_STRATEGIES)
    ).split(",")
    known = {"default", *HPSEARCH, *OPTUNA, *SIM}
    bad = [s for s in strategies if s not in known]
    if bad or (digits and any(s in OPTUNA or s in SIM for s in strategies)):
        print(
            f"efficiency.py: --strategies: unknown or not for {args.benchmark}: "
            f"{', '.join(bad or strategies)}",
            file=sys.stderr,
        )
        return 2
    try:
        reference = json.loads(Path(args.reference).read_text()) if args.reference else None
    except (OSError, ValueError) as exc:
        print(f"efficiency.py: --reference: cannot read {args.reference}: {exc}", file=sys.stderr)
        return 2
    if "random" not in strategies and reference is None:
        strategies.insert(0, "random")  # the reference
    instances = ["digits"] if digits else args.instances.split(",")
    data = args.data or os.environ.get("YAHPO_DATA")
    if not digits and not args.report_only:
        from bench.efficiency.lcbench import LCBench, default_data_dir

        data = data or str(default_data_dir())
        try:
            for instance in instances:
                LCBench(instance, data)
        except (FileNotFoundError, ValueError, ImportError) as exc:
            print(f"efficiency.py: {exc}", file=sys.stderr)
            return 2
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
        )
        # Seed by seed: an interrupted run has as many seeds of every strategy (--cache).
        for seed in range(args.seeds)
        for instance in instances
        for strategy in strategies
    ]
    n_jobs = args.jobs or (1 if args.workers > 1 or args.storage else os.cpu_count() or 1)
    started = time.monotonic()
    load_before = os.getloadavg()
    results: dict[tuple[str, str], list[Run]] = {}
    cached = _read_cache(args.cache)
    todo = []
    for job in jobs:
        run = cached.get(_cache_key(job))
        if run is not None:
            results.setdefault((job.instance, job.strategy), []).append(run)
        elif not args.report_only:
            todo.append(job)
    if args.report_only:
        strategies = [s for s in strategies if any((i, s) in results for i in instances)]
        instances = [i for i in instances if (i, "random") in results or reference]
    pool = mp.get_context("spawn").Pool(n_jobs) if n_jobs > 1 and todo else None
    try:
        mapped = pool.imap_unordered(_run_job_quiet, todo) if pool else map(_run_job_quiet, todo)
        for i, (job, run) in enumerate(mapped, start=1):
            run.extra["seed"] = job.seed
            results.setdefault((job.instance, job.strategy), []).append(run)
            _append_cache(args.cache, job, run)
            print(
                f"[{i}/{len(todo)}] {job.instance} {job.strategy} seed {job.seed}: final "
                f"{run.final:.2f}, {run.epochs} epochs, {run.extra.get('trials')} trials, "
                f"{run.extra['wall_s']:.1f} s",
                file=sys.stderr,
                flush=True,
            )
    finally:
        if pool:
            pool.close()
            pool.join()
    if _POOL is not None:
        _POOL.close()
    elapsed = time.monotonic() - started
    out: dict[str, Any] = {
        "command": " ".join(
            ["python", "-m", "bench.efficiency", *(argv if argv is not None else sys.argv[1:])]
        ),
        "benchmark": args.benchmark,
        "budget_epochs": budget,
        "seeds": list(range(args.seeds)),
        "workers": args.workers,
        "time_scale": args.time_scale if args.workers > 1 else 0,
        "default_strategy": dict(zip(("sampler", "pruner"), default_strategy(), strict=True)),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "load_average": {"before": load_before[0], "after": os.getloadavg()[0]},
        "elapsed_s": round(elapsed, 1),
        "instances": {},
    }
    print(
        f"\n{args.benchmark}, budget {budget} epochs, {args.seeds} seeds, "
        f"{args.workers} worker(s), {elapsed / 60:.1f} min"
    )
    for instance in instances:
        if reference is not None:
            target = reference["instances"][instance]["target"]
            where = f"random's mean final in {args.reference}"
        else:
            target = summarize(results[(instance, "random")], budget, -math.inf)["final_mean"]
            where = "random's mean final"
        table = {}
        print(f"\n{instance}: target {target:.2f} ({where})\n")
        print(
            "| strategy | final mean (sd) | speedup | 90% CI | seeds reached "
            "| median epochs to target | trials |"
        )
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for strategy in strategies:
            runs = results.get((instance, strategy))
            if not runs:
                continue
            s = summarize(runs, budget, target)
            s["trials_mean"] = sum(r.extra.get("trials", 0) for r in runs) / len(runs)
            s["finals"] = [r.final for r in runs]
            s["seed_list"] = sorted(r.extra.get("seed", -1) for r in runs)
            table[strategy] = s
            sp = f"{s['speedup']:.1f}x" if s["speedup"] else "not reached"
            lo, hi = s["speedup_ci90"]
            med = s["median_epochs_to_target"]
            print(
                f"| {strategy} | {s['final_mean']:.2f} ({s['final_sd']:.2f}) | {sp} "
                f"| {lo:.1f}-{hi:.1f} | {s['seeds_reached']}/{s['seeds']} "
                f"| {med if med is not None else '-'} | {s['trials_mean']:.0f} |"
            )
        out["instances"][instance] = {"target": target, "target_from": where, "strategies": table}
    path = Path(args.json or REPO / "bench" / "results" / f"efficiency-{args.benchmark}.json")
    write_json(path, out)
    print(f"\nwritten {path}")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
