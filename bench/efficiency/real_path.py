"""hpsearch's real path for bench/efficiency/runner.py: a study created as `hpsearch create`
does and run by real `Worker`s (their database connections, sampling and pruning), with a trial
function that reports the LCBench surrogate's curve (or trains digits) in place of a user's
training.

Everything here decides the result of the hpsearch strategies (``default``, ``random``, ...):
its source is hashed into their cache key (runner.CODE); the command line and the tables are
runner.py's.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from bench.efficiency.stats import Run

__all__ = [
    "DIGITS_EPOCHS",
    "EpochLog",
    "SurrogateTrial",
    "full_training",
    "hpsearch_study",
    "run_hpsearch",
    "run_worker",
    "study_config",
]

DIGITS_EPOCHS = 27


def has_epoch_budget() -> bool:
    """Whether this hpsearch has `[study] budget_epochs` (issue 20's budgets)."""
    from search.study.settings import StudySettings

    return any(f.name == "budget_epochs" for f in fields(StudySettings))


def full_training(benchmark: str) -> int:
    """The epochs of one fully trained trial of a benchmark (the shortest useful budget)."""
    if benchmark == "lcbench":
        from bench.efficiency.lcbench import EPOCHS

        return EPOCHS
    return DIGITS_EPOCHS


def study_config(
    name: str,
    sampler: str,
    pruner: dict[str, Any],
    seed: int,
    budget: int,
    benchmark: str,
    *,
    metric: str = "val_accuracy",
) -> Any:
    """The hpsearch config of one study of the benchmark (lcbench: scored by `metric`, one of
    lcbench.METRICS, in its direction)."""
    from search.study.parse_config import parse_config

    maximize = True
    if benchmark == "lcbench":
        from bench.efficiency.lcbench import METRICS, SPACE

        maximize = METRICS[metric]
        space = SPACE
    else:
        space = {
            "lr": {"type": "float", "low": 1e-5, "high": 1.0, "log": True},
            "weight_decay": {"type": "float", "low": 1e-6, "high": 1e-1, "log": True},
            "width": {"type": "int", "low": 8, "high": 128, "log": True},
            "dropout": {"type": "float", "low": 0.0, "high": 0.5},
        }
    task = {"name": "bench.efficiency.task:make_task", "epochs": full_training(benchmark)}
    study: dict[str, Any] = {
        "name": name,
        "direction": "maximize" if maximize else "minimize",
        "metric": metric,
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
    epoch lasts the surrogate's recorded runtime times `time_scale` (0: no wait). It reports
    `metric`'s own values (the study's direction says which way is better)."""

    instance: str
    data: str | None
    time_scale: float
    log: EpochLog
    budget: Budget | None = None
    stop_worker: Callable[[], None] | None = None
    metric: str = "val_accuracy"

    def __post_init__(self) -> None:
        from bench.efficiency.lcbench import LCBench

        self.bench = LCBench(self.instance, self.data, metric=self.metric)

    def __call__(self, run: Any) -> Any:
        from search.worker.trial import TrialOutcome

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
            value = curve.values[epoch - 1]
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


def run_worker(
    url: str,
    study: str,
    benchmark: str,
    instance: str,
    data: str | None,
    metric: str,
    time_scale: float,
    log_path: str,
    budget_left: int | None,
    left: Any = None,
) -> int:
    """One real `Worker` on study `study` at `url`, its trials reporting the surrogate's curve
    (or training digits) and logging their epochs to `log_path`; its exit code. `budget_left`
    (shared as `left` between the processes of `worker_pool.WorkerPool`): the epochs the
    bench's own budget has left, where hpsearch has no `budget_epochs`."""
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
        trial: Any = SurrogateTrial(
            instance, data, time_scale, log, budget, stop_worker, metric=metric
        )
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


def _vacuum_if_autovacuum_is_off(storage: Any) -> None:
    """VACUUM ANALYZE the benchmark's PostgreSQL database before a study where autovacuum is
    off (as on the CI machines here): without it the earlier studies' dead rows pile up and
    the planner has no statistics, and the same study ran 2.5x as long on a database holding
    60 earlier studies as on a fresh one (the claim's plan), which a run of many studies would
    count against its later studies. With autovacuum on, PostgreSQL does this itself."""
    from search.db.migrate import autovacuum_on

    if not autovacuum_on(storage):
        with storage.autocommit() as conn:
            conn.exec_driver_sql("VACUUM ANALYZE")


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
    workers (this process's own thread when 1) until it is done. The surrogate is scored by
    the config's `[study] metric`."""
    from search.db.storage import open_storage
    from search.sampling.setup import set_up_study

    storage = open_storage(url, create=True)
    if storage.is_postgres:
        from search.db.migrate import upgrade

        upgrade(storage)  # the benchmark's own database: it is its admin
        _vacuum_if_autovacuum_is_off(storage)
    set_up_study(storage, config, ["bench/efficiency/runner.py"])
    storage.close()
    log_path = os.path.join(tmp, f"{config.study.name}.log")
    budget = None if has_epoch_budget() else config.study.n_trials  # the bench's own count
    started = time.monotonic()
    metric = config.study.metric if benchmark == "lcbench" else "val_accuracy"
    args = (url, config.study.name, benchmark, instance, data, metric, time_scale, log_path)
    if workers == 1:
        codes: list[Any] = [run_worker(*args, budget)]
    else:
        from bench.efficiency.worker_pool import pool_of

        codes = pool_of(workers).run(args, budget)
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


def run_hpsearch(
    benchmark: str,
    instance: str,
    label: str,
    sampler: str,
    pruner: dict[str, Any],
    seed: int,
    budget: int,
    metric: str,
    workers: int,
    data: str | None,
    storage: str | None,
    time_scale: float,
) -> Run:
    """One study of an hpsearch strategy (`label` names it) on a fresh database (SQLite in a
    temporary directory unless `storage`); epochs take the surrogate's time x `time_scale`
    only with several workers."""
    name = f"eff-{instance}-{label}-{seed}-{uuid.uuid4().hex[:6]}"
    config = study_config(name, sampler, pruner, seed, budget, benchmark, metric=metric)
    with tempfile.TemporaryDirectory() as tmp:
        url = storage or f"sqlite:///{tmp}/efficiency.db"
        scale = time_scale if workers > 1 else 0.0
        return hpsearch_study(url, config, benchmark, instance, data, workers, scale, tmp)
