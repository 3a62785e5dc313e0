"""The worker processes of `--workers W` studies (bench/efficiency/real_path.py): W long-lived
processes that join each study together, each running a `Worker` of its own (a real one: its
own database connections, sampling and pruning), so that the start-up of a process (imports,
~2 s of CPU) is paid once per benchmark, not once per study.

Plumbing only: what a worker does in a study is `real_path.run_worker`'s, whose source is in
the strategies' cache key; this file is not (a change to how the processes are started or
ended changes no result).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import queue
from typing import Any

__all__ = ["WorkerPool", "close_pool", "pool_of", "running"]

STOP = "stop"
"""The task that ends a pool process."""


def _pool_process(tasks: Any, done: Any, left: Any) -> None:
    """A worker process of `WorkerPool`: runs one Worker per study it is handed, and ends
    within seconds of the harness, even one killed with SIGKILL (`exit_with_parent`: its
    Worker hands its trial back first)."""
    import warnings

    from bench.efficiency.real_path import run_worker
    from bench.signals import exit_with_parent

    orphaned = exit_with_parent()
    warnings.simplefilter("ignore")
    logging.basicConfig(level=logging.WARNING)
    while True:
        task = None
        while task is None and not orphaned.is_set():
            with contextlib.suppress(queue.Empty):
                task = tasks.get(timeout=1)
        if task is None or task == STOP:
            return
        try:
            code = run_worker(*task, left if task[-1] is not None else None)
        except Exception as exc:  # reported to the parent, which stops the benchmark
            code = f"{type(exc).__name__}: {exc}"
        done.put(code)


class WorkerPool:
    """W processes that run every study together (see the module)."""

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
            self.tasks.put(STOP)
        for p in self.procs:
            p.join(timeout=30)


_POOL: WorkerPool | None = None


def pool_of(workers: int) -> WorkerPool:
    """This process's pool of `workers` processes (started on first use, or anew for another
    W)."""
    global _POOL
    if _POOL is None or _POOL.workers != workers:
        close_pool()
        _POOL = WorkerPool(workers)
    return _POOL


def running() -> list[Any]:
    """The pool's processes, if one was started."""
    return list(_POOL.procs) if _POOL is not None else []


def close_pool() -> None:
    """Stop the worker processes of `--workers W` studies, if any were started."""
    global _POOL
    if _POOL is not None:
        _POOL.close()
        _POOL = None
