"""Coordination overhead: hpsearch's trial queue against plain Optuna, side by side, on PostgreSQL.

N trials of `--steps` reports `--step-s` apart (default 10 x 0.1 s = 1 s), W worker processes,
the same sampler on both sides (`--sampler`, default random) + Hyperband (min_resource 1,
reduction factor 3, max_resource = steps). Every trial reports the same scores, so Hyperband
evaluates every rung but prunes nothing: each trial lasts its full length, and the ideal wall
time is N * steps * step_s / W. The figure is wall time / ideal. A trial's value (its last
report on the hpsearch side, the objective's return value on Optuna's) depends on its params,
so that model-based samplers (TPE, CMA-ES, GP) have something to model.

Samplers, the same on both sides: random; TPE multivariate with constant liar (hpsearch's
`tpe`); CMA-ES; GP; QMC (scrambled Sobol, one seed for every process); grid (a grid of at
least N points).

Plain Optuna: each worker process runs `study.optimize` with `MaxTrialsCallback(N)`, reporting
with `trial.report` and asking `trial.should_prune()` every step, as the Optuna docs do.
hpsearch: each process runs `search.worker.loop.Worker` with the same trial function.

Two clocks per run, both stopped when the study's last trial is recorded finished in the
database: "steady" starts when every worker process has imported its libraries and connected
(they wait at a barrier), so it measures coordination while trials run; "cold" starts when the
processes are spawned, so it adds start-up (imports, connections), a one-time cost per worker
that a real study of hours amortizes. The processes' own exit after that is reported as exit_s.

    python -m bench.systems.scheduler                       # N=320, W=1,8,32 (about 25 minutes)
    python -m bench.systems.scheduler --workers 8,32 --trials 320 --sampler tpe
    python -m bench.systems.scheduler --workers 4 --trials 1000 --steps 3 --step-s 0.01   # at scale

With short trials the figure that matters is the coordination cost per trial:
overhead_ms_per_trial = (wall * W / N - steps * step_s), and the CPU per trial (the workers'
own, and the whole machine's, the database included).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import itertools
import json
import multiprocessing as mp
import os
import queue
import statistics
import sys
import time
import uuid
from typing import Any

from bench.stamp import write_json

STEPS, STEP_S = 10, 0.1
"""Default trial shape: 10 reports, 0.1 s apart."""
SAMPLERS = ("random", "tpe", "cmaes", "gp", "qmc", "grid")
BENCH_STORAGE = os.environ.get(
    "HPSEARCH_BENCH_STORAGE", "postgresql+psycopg://postgres@127.0.0.1:5432/hpsearch_bench"
)
"""Where benchmarks run: a database of their own, created if missing."""


def _busy_cpu_s() -> float:
    """CPU seconds the whole machine has been busy (all processes, the database included)."""
    with open("/proc/stat") as fh:
        fields = [float(x) for x in fh.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields) - idle) / os.sysconf("SC_CLK_TCK")


def trial_value(lr: float, width: int) -> float:
    """What a trial scores (both sides): best near lr = 3e-3, width = 32."""
    import math

    return 1.0 - (math.log10(lr) + 2.5) ** 2 / 10 - (math.log2(width) - 5) ** 2 / 40


def hpsearch_worker(
    url: str, study: str, ready: Any, go: Any, log: Any, steps: int, step_s: float
) -> None:
    from search.db.storage import open_storage
    from search.study.studies import open_study
    from search.worker.loop import Worker
    from search.worker.trial import TrialOutcome

    def one_trial(run: Any) -> TrialOutcome:
        start = time.perf_counter()
        for step in range(1, steps + 1):
            time.sleep(step_s)
            if run.report(step, 0.5):
                return TrialOutcome(status="pruned", value=0.5)
        log.put((os.getpid(), start, time.perf_counter()))
        return TrialOutcome(
            status="completed", value=trial_value(run.params["lr"], run.params["width"])
        )

    storage = open_storage(url)
    worker = Worker(
        storage, open_study(storage, study), run_trial=one_trial, grace_s=60, progress=False
    )
    worker.prepare()
    ready.release()
    go.wait()
    before = _own_cpu_s()
    code = worker.run()
    log.put(("cpu", _own_cpu_s() - before, worker.trials_run, "torch" in sys.modules))
    sys.exit(code)


def _own_cpu_s() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def optuna_sampler(name: str, n_trials: int) -> Any:
    """Plain Optuna's sampler for `--sampler name`, set up as hpsearch sets up its own."""
    import warnings

    import optuna

    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
    if name == "random":
        return optuna.samplers.RandomSampler()
    if name == "tpe":
        return optuna.samplers.TPESampler(multivariate=True, constant_liar=True)
    if name == "cmaes":
        return optuna.samplers.CmaEsSampler(warn_independent_sampling=False)
    if name == "gp":
        return optuna.samplers.GPSampler(warn_independent_sampling=False)
    if name == "qmc":  # one seed for every process: they walk one Sobol sequence together
        return optuna.samplers.QMCSampler(scramble=True, seed=0, warn_asynchronous_seeding=False)
    return optuna.samplers.GridSampler(_bench_config("grid", "grid", n_trials, 1).grid_values())


HPSEARCH_PRUNER = "hyperband"
"""The hpsearch side's pruner (`--hpsearch-pruner`): hyperband (Optuna's, as the Optuna side), or
asha (pause and promote; every trial reports the same scores, so every trial is promoted at
once at every rung: this measures what recording and ranking at the rungs costs)."""
HPSEARCH_BUDGET = False
"""`--budget-epochs`: the hpsearch side also counts every epoch against an epoch budget of
N * steps (reserved per rung, as a study with `budget_epochs` does)."""


def _bench_config(name: str, sampler: str, n_trials: int, steps: int) -> Any:
    from search.study.parse_config import parse_config

    budget = {"budget_epochs": n_trials * steps} if HPSEARCH_BUDGET else {}
    return parse_config(
        {
            "study": {"name": name, "n_trials": n_trials, "sampler": sampler, **budget},
            "pruner": {"type": HPSEARCH_PRUNER, "min_resource": 1, "reduction_factor": 3},
            "task": {"name": "digits", "epochs": steps},
            "space": {
                "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
                "width": {"type": "int", "low": 8, "high": 64, "log": True},
            },
            # At least N distinct points: 8 widths, and as many learning rates as needed.
            "grid": {"points": 8, "lr": _grid_lrs(-(-n_trials // 8))},
        }
    )


def _grid_lrs(n: int) -> list[float]:
    return [10 ** (-4 + 3 * i / max(1, n - 1)) for i in range(n)]


def optuna_worker(
    url: str,
    study_name: str,
    n_trials: int,
    ready: Any,
    go: Any,
    log: Any,
    steps: int,
    step_s: float,
    sampler: str,
) -> None:
    import optuna
    from optuna.study import MaxTrialsCallback

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(
        study_name=study_name,
        storage=url,
        sampler=optuna_sampler(sampler, n_trials),
        pruner=optuna.pruners.HyperbandPruner(
            min_resource=1, max_resource=steps, reduction_factor=3
        ),
    )

    def objective(trial: optuna.Trial) -> float:
        lr = trial.suggest_float("lr", 1e-4, 1e-1, log=True)
        width = trial.suggest_int("width", 8, 64, log=True)
        start = time.perf_counter()
        for step in range(1, steps + 1):
            time.sleep(step_s)
            trial.report(0.5, step)
            if trial.should_prune():
                raise optuna.TrialPruned()
        log.put((os.getpid(), start, time.perf_counter()))
        return trial_value(lr, width)

    ran = [0]

    def count(_study: optuna.Study, _trial: optuna.trial.FrozenTrial) -> None:
        ran[0] += 1

    ready.release()
    go.wait()
    before = _own_cpu_s()
    study.optimize(objective, callbacks=[MaxTrialsCallback(n_trials, states=None), count])
    log.put(("cpu", _own_cpu_s() - before, ran[0], "torch" in sys.modules))


def run_once(
    kind: str,
    url: str,
    n_trials: int,
    workers: int,
    *,
    sampler: str = "random",
    steps: int = STEPS,
    step_s: float = STEP_S,
) -> dict[str, Any]:
    import optuna

    name = f"bench-{kind}-{uuid.uuid4().hex[:8]}"
    if kind == "hpsearch":
        from search.db.migrate import upgrade
        from search.db.storage import open_storage
        from search.sampling.sample_ahead import queue_first_trials
        from search.study.studies import create_study

        config = _bench_config(name, sampler, n_trials, steps)
        storage = open_storage(url)
        upgrade(storage)
        queue_first_trials(storage, create_study(storage, config)[0])
        storage.close()
    else:
        optuna.create_study(study_name=name, storage=url, direction="maximize")

    sessions_before, commits_before = _database_counters(url)
    ctx = mp.get_context("spawn")
    ready, go, log = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    spawned = time.perf_counter()
    if kind == "hpsearch":
        procs = [
            ctx.Process(target=hpsearch_worker, args=(url, name, ready, go, log, steps, step_s))
            for _ in range(workers)
        ]
    else:
        procs = [
            ctx.Process(
                target=optuna_worker,
                args=(url, name, n_trials, ready, go, log, steps, step_s, sampler),
            )
            for _ in range(workers)
        ]
    for p in procs:
        p.start()
    for _ in procs:
        ready.acquire()
    started, busy = time.perf_counter(), _busy_cpu_s()
    started_utc = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    go.set()
    spans = []
    while any(p.is_alive() for p in procs) or not log.empty():
        with contextlib.suppress(queue.Empty):
            spans.append(log.get(timeout=0.2))
    for p in procs:
        p.join()
    ended, busy = time.perf_counter(), _busy_cpu_s() - busy

    study = optuna.load_study(study_name=name, storage=url)
    trials = study.get_trials(deepcopy=False)
    finished = sum(t.state.is_finished() for t in trials)
    # The study is done when its last trial is recorded finished; the workers' own exit is
    # reported apart.
    done_s = (last_finished_utc(trials) - started_utc).total_seconds()
    ideal = n_trials * steps * step_s / workers
    sessions, commits = _database_counters(url)
    return {
        "kind": kind,
        "sampler": sampler,
        "trials": n_trials,
        "steps": steps,
        "step_s": step_s,
        "db_sessions_opened": sessions - sessions_before - 1,
        "db_commits": commits - commits_before,
        "workers": workers,
        "trials_finished": finished,
        "trials_created": len(trials),
        "steady_s": round(done_s, 2),
        "cold_s": round(done_s + started - spawned, 2),
        "startup_s": round(started - spawned, 2),
        "exit_s": round(ended - started - done_s, 2),
        "ideal_s": ideal,
        "steady_ratio": round(done_s / ideal, 3),
        "cold_ratio": round((done_s + started - spawned) / ideal, 3),
        "machine_busy_cpu_s": round(busy, 1),
        # Coordination cost per trial: wall time beyond the trial's own sleep, per worker slot.
        "overhead_ms_per_trial": round(1000 * (done_s * workers / n_trials - steps * step_s), 1),
        "machine_cpu_ms_per_trial": round(1000 * busy / n_trials, 1),
        "db_commits_per_trial": round((commits - commits_before) / n_trials, 1),
        **_trial_timing(spans, started, ended, steps * step_s, n_trials),
    }


def last_finished_utc(trials: list[Any]) -> datetime.datetime:
    """When the last of `trials` was recorded finished, as naive UTC (Optuna keeps naive UTC
    in the database and hands out local time)."""
    last = max(t.datetime_complete for t in trials if t.datetime_complete)
    return last.astimezone(datetime.UTC).replace(tzinfo=None)


def _database_counters(url: str) -> tuple[int, int]:
    """Sessions opened and transactions committed in the database so far."""
    import sqlalchemy as sa

    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        row = conn.execute(
            sa.text(
                "SELECT sessions, xact_commit FROM pg_stat_database "
                "WHERE datname = current_database()"
            )
        ).one()
    engine.dispose()
    return row[0], row[1]


def _trial_timing(
    spans: list[tuple[int, float, float]],
    started: float,
    ended: float,
    trial_s: float,
    n_trials: int,
) -> dict:
    """Where the wall time went: inside trials (reports) or between them (claims, waiting)."""
    if not spans:
        return {}
    cpu = [s for s in spans if s[0] == "cpu"]
    spans = [s for s in spans if s[0] != "cpu"]
    inside = [end - start - trial_s for _, start, end in spans]
    by_worker: dict[int, list[tuple[float, float]]] = {}
    for pid, start, end in spans:
        by_worker.setdefault(pid, []).append((start, end))
    gaps, first = [], []
    for runs in by_worker.values():
        runs.sort()
        first.append(runs[0][0] - started)
        gaps += [b[0] - a[1] for a, b in itertools.pairwise(runs)]
    trials_per_worker = [n for _, _, n, _ in cpu]
    last_end = sorted(max(end for _, end in runs) for runs in by_worker.values())
    return {
        "workers_cpu_s": round(sum(c for _, c, _, _ in cpu), 1),
        "workers_cpu_ms_per_trial": round(1000 * sum(c for _, c, _, _ in cpu) / n_trials, 1),
        # Both sides should pay for the same imports: a surrogate trial needs no torch.
        "workers_that_imported_torch": sum(torch for _, _, _, torch in cpu),
        "trials_per_worker_min_max": [
            min(trials_per_worker, default=0),
            max(trials_per_worker, default=0),
        ],
        "worker_done_s_first_last": [
            round(last_end[0] - started, 1),
            round(last_end[-1] - started, 1),
        ],
        "report_overhead_ms_per_trial": round(1000 * statistics.mean(inside), 1),
        "first_trial_start_ms_mean_max": [
            round(1000 * statistics.mean(first), 1),
            round(1000 * max(first), 1),
        ],
        "gap_between_trials_ms": round(1000 * statistics.mean(gaps), 1),
        "gap_p90_ms": round(1000 * sorted(gaps)[int(0.9 * len(gaps))], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage", default=BENCH_STORAGE)
    parser.add_argument("--trials", type=int, default=320)
    parser.add_argument("--workers", default="1,8,32")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--sides", default="hpsearch,optuna", help="which sides to run")
    parser.add_argument("--sampler", default="random", choices=SAMPLERS, help="on both sides")
    parser.add_argument("--steps", type=int, default=STEPS, help="reports per trial")
    parser.add_argument("--step-s", type=float, default=STEP_S, help="seconds between reports")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument(
        "--hpsearch-pruner",
        choices=("hyperband", "asha"),
        default="hyperband",
        help="the hpsearch side's pruner (the Optuna side keeps Hyperband)",
    )
    parser.add_argument(
        "--budget-epochs",
        action="store_true",
        help="the hpsearch side counts every epoch against an epoch budget",
    )
    args = parser.parse_args()
    global HPSEARCH_PRUNER, HPSEARCH_BUDGET
    HPSEARCH_PRUNER, HPSEARCH_BUDGET = args.hpsearch_pruner, args.budget_epochs

    _ensure_database(args.storage)
    results = []
    for workers in [int(w) for w in args.workers.split(",")]:
        for repeat in range(args.repeats):
            # Alternate the order so neither side always runs on a warmer machine.
            kinds = ["hpsearch", "optuna"] if repeat % 2 == 0 else ["optuna", "hpsearch"]
            for kind in [k for k in kinds if k in args.sides.split(",")]:
                result = run_once(
                    kind,
                    args.storage,
                    args.trials,
                    workers,
                    sampler=args.sampler,
                    steps=args.steps,
                    step_s=args.step_s,
                )
                results.append(result)
                print(json.dumps(result), flush=True)

    trial_s = args.steps * args.step_s
    print(
        f"\nN={args.trials} trials of {args.steps} x {args.step_s:g} s, PostgreSQL, "
        f"{args.sampler} + Hyperband; {os.cpu_count()} CPUs; ratio = wall / (N * {trial_s:g} s / W)"
    )
    print(
        f"{'W':>3}  {'side':<9} {'steady ratio':>20}  {'cold ratio':>20}  {'finished':>8}  "
        f"{'overhead ms/trial':>17}  {'worker CPU ms/trial':>19}"
    )
    for workers in sorted({r["workers"] for r in results}):
        for kind in ("hpsearch", "optuna"):
            rows = [r for r in results if r["workers"] == workers and r["kind"] == kind]
            if rows:
                print(
                    f"{workers:>3}  {kind:<9} {_spread([r['steady_ratio'] for r in rows]):>20}  "
                    f"{_spread([r['cold_ratio'] for r in rows]):>20}  "
                    f"{'/'.join(str(r['trials_created']) for r in rows):>8}  "
                    f"{_spread([r['overhead_ms_per_trial'] for r in rows], 1):>17}  "
                    f"{_cpu_per_trial(rows):>19}"
                )
    if args.json:
        write_json(args.json, results)


def _cpu_per_trial(rows: list[dict[str, Any]]) -> str:
    """The workers' own CPU per trial, while the study runs (start-up not included)."""
    values = [r["workers_cpu_ms_per_trial"] for r in rows if "workers_cpu_ms_per_trial" in r]
    return _spread(values, 1) if values else "-"


def _spread(values: list[float], digits: int = 3) -> str:
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    mean, sd = statistics.mean(values), statistics.stdev(values)
    return f"{mean:.{digits}f} ± {sd:.{digits}f} (n={len(values)})"


def _ensure_database(url: str) -> None:
    import sqlalchemy as sa

    target = sa.engine.make_url(url)
    admin = sa.create_engine(target.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        exists = conn.execute(
            sa.text("SELECT 1 FROM pg_database WHERE datname = :d"), {"d": target.database}
        ).first()
        if not exists:
            conn.execute(sa.text(f'CREATE DATABASE "{target.database}"'))
    admin.dispose()


if __name__ == "__main__":
    main()
