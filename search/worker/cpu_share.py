"""Workers on one machine share its cores: each trains with its share of CPU threads.

torch starts one intra-op thread per core. Several `hpsearch worker` processes started one by
one on a machine (README's fleet, a scheduler's job array) would each start that many, and on
a busy machine they spend their time fighting over the cores (measured in bench/BENCHMARKS.md,
"Workers sharing a machine"). `run --workers N` and `--gpus all` children get
``OMP_NUM_THREADS`` from their launcher (`search.worker.local_gpus.child_plans`); a worker
started alone learns how many workers share its machine from the database: the live workers
registered with its hostname (of any study: they share the cores all the same), itself
included. It takes ``cores // that`` threads, looked at again before each trial, so the share
follows workers that come and go.

The user's choice wins: with ``OMP_NUM_THREADS`` set nothing is changed, and a task that calls
``torch.set_num_threads`` does so after this (when the trial builds it), so its call stands.

    threads = share_cpu_threads(storage, hostname)   # before each trial; None: left alone
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from search.db.liveness import live_workers_on_host
from search.db.storage import Storage

__all__ = ["share_cpu_threads", "thread_share"]


def thread_share(cpu_count: int, workers_on_host: int) -> int:
    """Threads for one of `workers_on_host` workers on a machine of `cpu_count` cores."""
    return max(1, cpu_count // max(1, workers_on_host))


def share_cpu_threads(
    storage: Storage,
    hostname: str,
    *,
    env: Mapping[str, str] = os.environ,
    cpu_count: int | None = None,
) -> int | None:
    """Set torch's CPU threads to this worker's share of the machine; returns the number, or
    None when the user set them (``OMP_NUM_THREADS``)."""
    if env.get("OMP_NUM_THREADS"):
        return None
    cores = cpu_count or _usable_cores()
    threads = thread_share(cores, live_workers_on_host(storage, hostname))
    import torch  # only here: commands that train nothing (status, --help) never load torch

    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return threads


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))  # a container's or taskset's share of the machine
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
