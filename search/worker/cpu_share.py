"""Workers on one machine share its cores: each trains with its share of CPU threads.

torch starts one intra-op thread per core. Several `hpsearch worker` processes started one by
one on a machine (README's fleet, a scheduler's job array) would each start that many, and on
a busy machine they spend their time fighting over the cores (measured in bench/BENCHMARKS.md,
"Workers sharing a machine"). `run --workers N` and `--gpus all` children get
``OMP_NUM_THREADS`` from their launcher (`search.worker.local_gpus.child_plans`); a worker
started alone learns how many workers share its machine from the database: the live workers
registered with its hostname (of any study: they share the cores all the same), itself
included. It takes ``cores // that`` threads.

The share costs a worker nothing it would not pay anyway: it is set through the environment
(``OMP_NUM_THREADS``, which torch reads when it is first imported) until torch is imported,
and through ``torch.set_num_threads`` only once it is, so a worker whose trials never touch
torch (a surrogate benchmark, a task of its own) never imports it. A worker looks the count
up when it starts and again at most every `REFRESH_S` (`CoreShare`), not before every trial,
so the share follows workers that come and go within a minute at no per-trial cost.

The user's choice wins: with ``OMP_NUM_THREADS`` set (by anyone but this module) nothing is
changed, and a task that calls ``torch.set_num_threads`` does so after this (when the trial
builds it), so its call stands.

    share = CoreShare(storage, hostname)
    threads = share.apply()        # before each trial; None: left alone
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, MutableMapping

from search.db.liveness import live_workers_on_host
from search.db.storage import Storage

__all__ = ["REFRESH_S", "CoreShare", "set_thread_share", "share_cpu_threads", "thread_share"]

REFRESH_S = 60.0
"""Seconds a worker keeps the count of live workers on its host before looking it up again."""
OURS = "HPSEARCH_THREAD_SHARE"
"""Set next to ``OMP_NUM_THREADS`` when this module set it: its value is then not the user's."""


def thread_share(cpu_count: int, workers_on_host: int) -> int:
    """Threads for one of `workers_on_host` workers on a machine of `cpu_count` cores."""
    return max(1, cpu_count // max(1, workers_on_host))


def user_threads(env: MutableMapping[str, str]) -> bool:
    """Whether the user chose the threads (``OMP_NUM_THREADS`` set, and not by this module)."""
    value = env.get("OMP_NUM_THREADS")
    return bool(value) and value != env.get(OURS)


def set_thread_share(threads: int, env: MutableMapping[str, str]) -> None:
    """`threads` CPU threads for what this process trains: in the environment for a torch not
    yet imported (and for child processes), through torch once it is imported."""
    env["OMP_NUM_THREADS"] = env[OURS] = str(threads)
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def share_cpu_threads(
    storage: Storage,
    hostname: str,
    *,
    env: MutableMapping[str, str] = os.environ,
    cpu_count: int | None = None,
) -> int | None:
    """Set this worker's CPU threads to its share of the machine, counting the live workers on
    `hostname` now; returns the number, or None when the user set them (``OMP_NUM_THREADS``)."""
    if user_threads(env):
        return None
    threads = thread_share(cpu_count or _usable_cores(), live_workers_on_host(storage, hostname))
    set_thread_share(threads, env)
    return threads


class CoreShare:
    """One worker's share of its machine's cores, the live workers on its host counted at the
    first `apply` and again once `refresh_s` have passed since."""

    def __init__(
        self,
        storage: Storage,
        hostname: str,
        *,
        env: MutableMapping[str, str] = os.environ,
        cpu_count: int | None = None,
        refresh_s: float = REFRESH_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.storage, self.hostname, self.env = storage, hostname, env
        self.cpu_count, self.refresh_s, self.clock = cpu_count, refresh_s, clock
        self._counted_at = -float("inf")
        self._threads: int | None = None

    def apply(self) -> int | None:
        """The share, set (see `share_cpu_threads`); the database is asked only when the last
        count is older than `refresh_s`."""
        if user_threads(self.env):
            return None
        if self._threads is None or self.clock() - self._counted_at >= self.refresh_s:
            self._threads = share_cpu_threads(
                self.storage, self.hostname, env=self.env, cpu_count=self.cpu_count
            )
            self._counted_at = self.clock()
        else:  # cheap: a trial that changed torch's threads gets its share back
            set_thread_share(self._threads, self.env)
        return self._threads


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))  # a container's or taskset's share of the machine
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
