"""`hpsearch compare`: the same search under several strategies, at one budget, K repeats each.

A strategy is a sampler and a pruner. Every (strategy, repeat) is an ordinary study named
``<name>-<sampler>[-<pruner>]-r<k>`` (no pruner suffix for ``none``), created like `hpsearch
create` does and run by local workers like `hpsearch run` does, so `status`, `worker` and the
dashboard see it as any other study. Running the same command again finds those studies by name
(the same config, so `create` is idempotent), skips the finished ones and finishes the others.

Example::

    >>> from search.study.config import parse_config
    >>> cfg = parse_config({
    ...     "study": {"name": "demo"},
    ...     "task": {"name": "digits", "epochs": 3},
    ...     "space": {"lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
    ...               "dropout": {"type": "float", "low": 0.0, "high": 0.5}},
    ... })
    >>> {k: len(v) for k, v in grid_for_budget(cfg, 9).items()}
    {'lr': 3, 'dropout': 3}
    >>> {k: len(v) for k, v in grid_for_budget(cfg, 10).items()}  # 12 points, 10 of them run
    {'lr': 4, 'dropout': 3}
    >>> [run.name for run in plan_compare(cfg, parse_strategies("grid,tpe", "none", cfg), 9, 1)]
    ['demo-grid-r1', 'demo-tpe-r1']
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from search.db.storage import Storage, open_storage
from search.monitor.status import study_status
from search.sampling.samplers import derived_seed
from search.study.config import (
    PRUNERS,
    SAMPLERS,
    ConfigError,
    GridSettings,
    PrunerSettings,
    StudyConfig,
)
from search.study.setup import set_up_study
from search.study.space import CategoricalParam, Param, Scalar
from search.study.studies import StudyRef

__all__ = [
    "CompareRun",
    "Strategy",
    "grid_for_budget",
    "grid_minimum",
    "parse_strategies",
    "plan_compare",
    "prepare_studies",
    "run_studies",
]

logger = logging.getLogger("search.compare.run")


@dataclass(frozen=True)
class Strategy:
    """A sampler and a pruner (``none``: every trial trains all its epochs)."""

    sampler: str
    pruner: str = "none"

    @property
    def label(self) -> str:
        """``tpe``, ``tpe-hyperband``: the part of the study name that names the strategy."""
        return self.sampler if self.pruner == "none" else f"{self.sampler}-{self.pruner}"


@dataclass(frozen=True)
class CompareRun:
    """One study of a comparison: a strategy's k-th repeat (k counts from 1)."""

    strategy: Strategy
    repeat: int
    config: StudyConfig

    @property
    def name(self) -> str:
        return self.config.study.name

    @property
    def seed(self) -> int:
        return self.config.study.seed


def parse_strategies(samplers: str, pruners: str | None, config: StudyConfig) -> list[Strategy]:
    """Every sampler x pruner of two comma-separated lists; ConfigError names a bad one.

    Without `pruners`, the config's own `[pruner]` type is the only one.
    """
    sampler_names = _names("--samplers", samplers, SAMPLERS)
    pruner_names = (
        [config.pruner.type] if pruners is None else _names("--pruners", pruners, PRUNERS)
    )
    return [Strategy(s, p) for s in sampler_names for p in pruner_names]


def _names(option: str, text: str, known: tuple[str, ...]) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ConfigError(f"{option}: give at least one of {', '.join(known)}")
    for n in names:
        if n not in known:
            raise ConfigError(f"{option}: unknown value {n!r} (choose from {', '.join(known)})")
    if len(set(names)) != len(names):
        raise ConfigError(f"{option}: {text!r} names a value twice")
    return names


def _fixed_values(config: StudyConfig, param: Param) -> list[Scalar] | None:
    """A parameter's grid values when the budget does not choose them (categorical choices,
    explicit `[grid]` values), else None."""
    if param.name in config.grid.values:
        return list(config.grid.values[param.name])
    if isinstance(param, CategoricalParam):
        return list(param.choices)
    return None


def grid_minimum(config: StudyConfig) -> int:
    """The smallest grid: every choice of a categorical (or listed `[grid]` values), and both
    ends of every numeric range."""
    return math.prod(len(_fixed_values(config, p) or [0, 0]) for p in config.space)


def grid_for_budget(config: StudyConfig, budget: int) -> dict[str, list[Scalar]]:
    """Grid values per parameter for a budget of `budget` trials.

    Categorical parameters (and those with `[grid]` values listed) keep all their values. The
    numeric ones start at two points (the ends of their range) and gain one point at a time, the
    one with the fewest points first (the first in `[space]` order on a tie), until the grid has
    at least `budget` points: 9 -> 3 x 3. A budget that is no product of such counts gets the
    smallest such grid above it and runs `budget` of its points, the ones the grid sampler's
    seeded shuffle picks first: 10 -> 4 x 3 = 12 points, 10 of them run. Points are evenly
    spaced over the range, log-spaced where log = true. ConfigError if `budget` is below
    `grid_minimum`, or if no more points fit (integer ranges run out of values).
    """
    minimum = grid_minimum(config)
    if not config.space or minimum < 2:
        raise ConfigError("grid: [space] has nothing to grid (it needs two points at least)")
    if budget < minimum:
        raise ConfigError(
            f"--budget {budget}: below the grid's minimum of {minimum} points (every choice of "
            "a categorical, both ends of each numeric range); raise --budget or leave grid out"
        )
    values = {p.name: _fixed_values(config, p) for p in config.space}
    points = {p.name: 2 for p in config.space if values[p.name] is None}
    grid = {p.name: values[p.name] or p.grid_values(points[p.name]) for p in config.space}
    while math.prod(len(v) for v in grid.values()) < budget:
        growable = [
            p
            for p in config.space
            if p.name in points and len(p.grid_values(points[p.name] + 1)) > len(grid[p.name])
        ]
        if not growable:
            raise ConfigError(
                f"--budget {budget}: more than the {math.prod(map(len, grid.values()))} distinct "
                "points the grid can have over [space]; lower --budget or leave grid out"
            )
        grow = min(growable, key=lambda p: len(grid[p.name]))
        points[grow.name] += 1
        grid[grow.name] = grow.grid_values(points[grow.name])
    return grid


def _pruner_settings(config: StudyConfig, kind: str) -> PrunerSettings:
    if kind == config.pruner.type:
        return config.pruner
    settings = PrunerSettings(type=kind)
    if kind in ("hyperband", "successive_halving", "asha") and (
        settings.min_resource > config.task.epochs
    ):
        raise ConfigError(
            f"--pruners {kind}: its min_resource {settings.min_resource} is more than "
            f"task.epochs = {config.task.epochs}"
        )
    return settings


def plan_compare(
    config: StudyConfig,
    strategies: Sequence[Strategy],
    budget: int | None,
    repeats: int,
    *,
    budget_epochs: int | None = None,
) -> list[CompareRun]:
    """The studies of a comparison, repeat by repeat (so that a comparison stopped half-way has
    the same repeats of every strategy). ConfigError on bad input; nothing is touched here.

    `budget`: trials per study; `budget_epochs`: epochs trained per study, pruned trials'
    included (equal compute): every study gets `[study] budget_epochs` and no trial cap, but
    the grid, which runs budget_epochs // task.epochs of its points (with the budget too).

    Seeds: repeat k of a strategy gets `derived_seed(study.seed, k, "compare:<label>")`, so
    repeats differ in seed and no two strategies share a random stream (TPE's first trials would
    otherwise draw exactly random search's points). The grid visits the same points in every
    repeat; its seed changes the trials' training seeds and the order of the points.
    """
    if budget_epochs is not None:
        if budget_epochs < 1:
            raise ConfigError(f"--budget-epochs: must be >= 1, got {budget_epochs}")
        grid_trials = budget_epochs // config.task.epochs
        if any(s.sampler == "grid" for s in strategies) and grid_trials < grid_minimum(config):
            raise ConfigError(
                f"--budget-epochs {budget_epochs}: {grid_trials} fully trained trials of "
                f"{config.task.epochs} epochs, below the grid's minimum of "
                f"{grid_minimum(config)} points; raise --budget-epochs or leave grid out"
            )
        budget = budget or max(1, grid_trials)
    if budget is None or budget < 1:
        raise ConfigError(f"--budget: must be >= 1, got {budget}")
    if repeats < 1:
        raise ConfigError(f"--repeats: must be >= 1, got {repeats}")
    grid = None
    if any(s.sampler == "grid" for s in strategies):
        grid = grid_for_budget(config, budget)
    runs = []
    for k in range(1, repeats + 1):
        for strategy in strategies:
            seed = derived_seed(config.study.seed, k, f"compare:{strategy.label}")
            study = config.with_study(
                name=f"{config.study.name}-{strategy.label}-r{k}",
                sampler=strategy.sampler,
                seed=seed,
                n_trials=budget if budget_epochs is None or strategy.sampler == "grid" else None,
                budget_epochs=budget_epochs,
                budget_hours=None,
            )
            changes: dict[str, Any] = {"pruner": _pruner_settings(config, strategy.pruner)}
            if strategy.sampler == "grid" and grid is not None:
                changes["grid"] = GridSettings(
                    points=max(len(v) for v in grid.values()),
                    values={name: tuple(v) for name, v in grid.items()},
                )
            runs.append(CompareRun(strategy, k, dataclasses.replace(study, **changes)))
    return runs


def prepare_studies(
    storage: Storage, runs: Sequence[CompareRun], argv: Sequence[str]
) -> list[StudyRef]:
    """Create every study of the comparison (as `hpsearch create` does, note included), or find
    it again with the same config; a study of that name with another config is a ConfigError
    (exit 2)."""
    return [set_up_study(storage, run.config, argv)[0] for run in runs]


RunStudy = Callable[[StudyRef], int]
"""Runs workers on one study until it is done; returns their exit code."""


def run_studies(
    url: str,
    runs: Sequence[CompareRun],
    refs: Sequence[StudyRef],
    run_study: RunStudy,
    *,
    repeats: int,
) -> int:
    """Run every unfinished study in turn, with a progress display; the first exit code that
    is not 0 stops the comparison and is returned."""
    storage = open_storage(url)
    try:
        for i, (run, ref) in enumerate(zip(runs, refs, strict=True), start=1):
            where = f"[{i}/{len(runs)}] {run.strategy.label} repeat {run.repeat}/{repeats}"
            status = study_status(storage, ref)
            if _study_done(status):
                print(f"{where}: {_describe(status)} (already done)", file=sys.stderr)
                continue
            progress = _Progress(storage, ref, where)
            progress.start()
            try:
                code = run_study(ref)
            finally:
                progress.stop()
            if code != 0:
                return code
            if not _study_done(study_status(storage, ref)):
                # The workers stopped without finishing (SIGTERM: they handed their trials
                # back); so does the comparison, instead of starting the next study.
                return 130

    finally:
        storage.close()
    return 0


def _finished(status: dict[str, Any]) -> int:
    return status["complete"] + status["pruned"] + status["failed"]


def _study_done(status: dict[str, Any]) -> bool:
    """Nothing runs, waits or sits paused, and the trial cap or the epoch budget is reached."""
    if status["running"] or status["waiting"] or status["paused"]:
        return False
    if status["n_trials"] and _finished(status) >= status["n_trials"]:
        return True
    epochs = (status.get("budget") or {}).get("epochs")
    return epochs is not None and epochs["left"] == 0


def _describe(status: dict[str, Any]) -> str:
    best = status["best"]
    shown = "none yet" if best is None else f"{best['value']:.4g} (trial {best['number']})"
    pruned = f", {status['pruned']} pruned" if status["pruned"] else ""
    failed = f", {status['failed']} failed" if status["failed"] else ""
    epochs = (status.get("budget") or {}).get("epochs")
    spent = "" if epochs is None else f", {epochs['used']}/{epochs['budget']} epochs"
    of = f"/{status['n_trials']}" if status["n_trials"] else ""
    return (
        f"{_finished(status)}{of} trials done{pruned}{failed}{spent}, "
        f"best {status['metric']} {shown}"
    )


class _Progress:
    """One line per study: strategy, repeat, trials done, best so far. Redrawn every second
    on a terminal; elsewhere (a log file, CI) one line each time a trial finishes."""

    def __init__(self, storage: Storage, ref: StudyRef, where: str) -> None:
        self.storage, self.ref, self.where = storage, ref, where
        self.tty = sys.stderr.isatty()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="compare-progress", daemon=True)
        self._last = ""

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._draw(final=True)

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            self._draw(final=False)

    def _draw(self, *, final: bool) -> None:
        try:
            text = f"{self.where}: {_describe(study_status(self.storage, self.ref))}"
        except Exception:  # a line not redrawn this second costs nothing
            return
        if self.tty:
            sys.stderr.write(f"\r\033[K{text}" + ("\n" if final else ""))
        elif text != self._last:
            sys.stderr.write(text + "\n")
        self._last = text
        sys.stderr.flush()


def run_local_workers(
    url: str,
    study_name: str,
    devices: Sequence[str],
    worker_argv: Sequence[str],
    log_path: Path,
) -> int:
    """`hpsearch worker` processes on one study, one per device, their logs in `log_path`.

    The storage URL travels in the environment, never on the command line (where `ps` would
    show its password). CPU workers split the cores between them.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cpu_workers = sum(d == "cpu" for d in devices)
    children: list[subprocess.Popen[bytes]] = []
    with open(log_path, "ab") as log:
        for device in devices:
            env = dict(os.environ, HPSEARCH_STORAGE=url, HPSEARCH_PROGRESS="0")
            if device.startswith("cuda:"):
                env["CUDA_VISIBLE_DEVICES"] = device.split(":", 1)[1]
                device = "cuda:0"
            elif cpu_workers > 1:
                env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // cpu_workers))
            cmd = [sys.executable, "-m", "search", "worker", "--study", study_name]
            children.append(
                subprocess.Popen(
                    [*cmd, "--device", device, *worker_argv], env=env, stdout=log, stderr=log
                )
            )

    def forward(signum: int, _frame: Any) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    previous = signal.signal(signal.SIGTERM, forward)
    interrupted = False
    try:
        while any(child.poll() is None for child in children):
            try:
                time.sleep(0.2)
            except KeyboardInterrupt:
                # The terminal sent Ctrl-C to the children too; they checkpoint and hand back.
                interrupted = True
    finally:
        signal.signal(signal.SIGTERM, previous)
    codes = [child.returncode for child in children]
    if interrupted or 130 in codes:
        return 130
    if any(codes):
        logger.error("a worker of %s failed (exit codes %s); see %s", study_name, codes, log_path)
        return 1
    return 0


@dataclass(frozen=True)
class CompareRequest:
    """What `hpsearch compare` was asked, validated."""

    config_path: str
    config: StudyConfig
    strategies: tuple[Strategy, ...]
    budget: int
    """Trials per study (the grid's, with `budget_epochs`)."""
    repeats: int
    out_dir: Path
    target: float | None
    """The score counted as reached for "epochs to target"; None: the pooled quantile rule."""
    budget_epochs: int | None = None
    """Epochs per study (equal compute), pruned trials' included; None: a budget in trials."""


def compare_command(
    args: Any,
    *,
    url: str,
    devices: Sequence[str],
    worker_argv: Sequence[str],
    artifacts_dir: str | None,
    run_in_process: Callable[[Storage, str, str], int],
) -> int:
    """`hpsearch compare` after the command line is parsed: validate everything (ConfigError,
    exit 2, nothing written), create or find the studies, run the unfinished ones, write the
    report and attach it to every study."""
    from search.compare.report import attach_report, write_report  # matplotlib, scipy: here only
    from search.study.config import load_config
    from search.worker.preflight import check_task

    config = load_config(args.config)
    strategies = parse_strategies(args.samplers, args.pruners, config)
    budget_epochs = getattr(args, "budget_epochs", None)
    pruning = [s.label for s in strategies if s.pruner != "none"]
    if budget_epochs is None and pruning:
        # Pruning saves epochs; at a budget in trials it could not spend them on more
        # configurations. Strategies are compared at the compute of --budget full trials.
        budget_epochs = args.budget * config.task.epochs
        print(
            f"compare: {', '.join(pruning)} prune: every strategy gets the same compute, "
            f"{args.budget} trials x {config.task.epochs} epochs = {budget_epochs} epochs",
            file=sys.stderr,
        )
    runs = plan_compare(config, strategies, args.budget, args.repeats, budget_epochs=budget_epochs)
    budget = args.budget or max(1, (budget_epochs or 0) // config.task.epochs)
    out_dir = Path(args.out)
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"--out {out_dir}: exists and is not a directory")
    check_task(config)
    storage = open_storage(url, create=True)
    try:
        refs = prepare_studies(storage, runs, getattr(args, "argv", None) or sys.argv[1:])
    finally:
        storage.close()
    logs = out_dir / "logs"
    per_study = f"{budget_epochs} epochs" if budget_epochs else f"{budget} trials"
    print(
        f"compare: {len(strategies)} strategies x {args.repeats} repeats of {per_study} "
        f"({len(runs)} studies named {config.study.name}-<strategy>-r<k>); worker logs in {logs}",
        file=sys.stderr,
    )

    def run_study(ref: StudyRef) -> int:
        log_path = logs / f"{ref.name}.log"
        if len(devices) > 1:
            return run_local_workers(url, ref.name, devices, worker_argv, log_path)
        device = devices[0]
        return _in_process(lambda: run_in_process(open_storage(url), ref.name, device), log_path)

    code = run_studies(url, runs, refs, run_study, repeats=args.repeats)
    if code != 0:
        print(
            "compare: stopped before every study finished; the same command finishes them",
            file=sys.stderr,
        )
        return code
    request = CompareRequest(
        config_path=str(args.config),
        config=config,
        strategies=tuple(strategies),
        budget=budget or 0,
        repeats=args.repeats,
        out_dir=out_dir,
        target=args.target,
        budget_epochs=budget_epochs,
    )
    storage = open_storage(url)
    try:
        written = write_report(storage, request, runs, refs)
        attach_report(storage, refs, written, artifacts_dir)
    finally:
        storage.close()
    print(f"compare: report in {written.markdown} and {written.html}")
    for line in written.conclusions:
        print(f"  {line}")
    return 0


def _in_process(run: Callable[[], int], log_path: Path) -> int:
    """Run a worker in this process with its log lines going to `log_path`: the terminal
    keeps the progress display, and no worker draws its own line (HPSEARCH_PROGRESS=0)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    search_logger = logging.getLogger("search")
    handler = logging.FileHandler(log_path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    saved = (search_logger.propagate, search_logger.level, os.environ.get("HPSEARCH_PROGRESS"))
    search_logger.addHandler(handler)
    search_logger.propagate = False
    search_logger.setLevel(logging.INFO)
    os.environ["HPSEARCH_PROGRESS"] = "0"
    try:
        return run()
    finally:
        search_logger.removeHandler(handler)
        handler.close()
        search_logger.propagate, level, progress = saved
        search_logger.setLevel(level)
        if progress is None:
            os.environ.pop("HPSEARCH_PROGRESS", None)
        else:
            os.environ["HPSEARCH_PROGRESS"] = progress
