"""Workers started one by one on a machine share its cores, as `run --workers N` children do."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
import torch

from search.db.liveness import live_workers_on_host
from search.db.storage import Storage, open_storage
from search.db.tables import workers
from search.study.studies import create_study
from search.worker.cpu_share import OURS, CoreShare, share_cpu_threads, thread_share
from search.worker.loop import Worker
from search.worker.trial import TrialOutcome, TrialRun
from tests.helpers.configs import make_config
from tests.helpers.dispatch import register


@pytest.fixture(autouse=True)
def _torch_threads_restored(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    before = torch.get_num_threads()
    for name in ("OMP_NUM_THREADS", OURS):  # a worker run here sets them: restored after
        monkeypatch.delenv(name, raising=False)
    yield
    torch.set_num_threads(before)


def test_the_share_follows_the_live_workers_of_the_host(storage_url: str, study_name: str) -> None:
    storage = open_storage(storage_url)
    ref, _ = create_study(storage, make_config(study_name, n_trials=1))
    host = f"host-{study_name[-6:]}"
    assert live_workers_on_host(storage, host) == 0
    for i in range(3):
        register(storage, ref.study_id, f"{study_name[-20:]}-a{i}", grace_s=60)
    with storage.transaction() as conn:  # those three run on `host`; then one elsewhere
        conn.execute(
            sa.update(workers)
            .where(workers.c.worker_id.startswith(f"{study_name[-20:]}-a"))
            .values(hostname=host)
        )
    register(storage, ref.study_id, f"{study_name[-20:]}-elsewhere", grace_s=60)
    assert live_workers_on_host(storage, host) == 3
    assert share_cpu_threads(storage, host, env={}, cpu_count=12) == 4
    assert torch.get_num_threads() == 4
    assert share_cpu_threads(storage, host, env={}, cpu_count=2) == 1

    # One of them stops: the others' share grows at their next trial.
    with storage.transaction() as conn:
        conn.execute(
            sa.update(workers)
            .where(workers.c.worker_id == f"{study_name[-20:]}-a0")
            .values(stopped_at=workers.c.heartbeat_at)
        )
    assert share_cpu_threads(storage, host, env={}, cpu_count=12) == 6

    # The user's setting wins.
    torch.set_num_threads(3)
    assert share_cpu_threads(storage, host, env={"OMP_NUM_THREADS": "5"}, cpu_count=12) is None
    assert torch.get_num_threads() == 3
    assert [thread_share(16, n) for n in (0, 1, 2, 3, 4, 32)] == [16, 16, 8, 5, 4, 1]


def test_a_worker_trains_with_its_share_of_the_cores(
    pg_url: str, study_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker started alone on a machine where three others are alive trains its trials with
    a quarter of the cores; with OMP_NUM_THREADS set it leaves torch's threads alone."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(8)))  # an 8-core machine
    storage = open_storage(pg_url)
    ref, _ = create_study(storage, make_config(study_name, n_trials=2))
    others = [f"{study_name[-20:]}-o{i}" for i in range(3)]
    for other in others:
        register(storage, ref.study_id, other, grace_s=600)
    with storage.transaction() as conn:
        conn.execute(
            sa.update(workers)
            .where(workers.c.worker_id.in_(others))
            .values(hostname=socket.gethostname()[:255])
        )
    seen: list[int] = []

    def trial(run: TrialRun) -> TrialOutcome:
        seen.append(torch.get_num_threads())
        for epoch in range(1, run.config.task.epochs + 1):
            run.report(epoch, 0.5)
        return TrialOutcome(status="completed", value=0.5)

    torch.set_num_threads(8)
    assert Worker(storage, ref, run_trial=trial, grace_s=600, progress=False).run() == 0
    assert seen == [2, 2]  # 8 cores, 4 live workers on this host

    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    ref2, _ = create_study(storage, make_config(f"{study_name}-b", n_trials=1))
    torch.set_num_threads(3)
    assert Worker(storage, ref2, run_trial=trial, grace_s=600, progress=False).run() == 0
    assert seen[-1] == 3


def _on_host(storage_url: str, study_name: str, host: str, n: int) -> tuple[Storage, list[str]]:
    storage = open_storage(storage_url)
    ref, _ = create_study(storage, make_config(study_name, n_trials=1))
    ids = [f"{study_name[-20:]}-w{i}" for i in range(n)]
    for worker_id in ids:
        register(storage, ref.study_id, worker_id, grace_s=600)
    with storage.transaction() as conn:
        conn.execute(sa.update(workers).where(workers.c.worker_id.in_(ids)).values(hostname=host))
    return storage, ids


def test_the_count_of_workers_is_not_asked_before_every_trial(
    storage_url: str, study_name: str
) -> None:
    """A worker counts the live workers on its host when it starts and again only once
    `refresh_s` have passed: trials in between cost no query, and the share still follows."""
    host = f"host-{study_name[-6:]}"
    storage, ids = _on_host(storage_url, study_name, host, 4)
    now = [0.0]
    env: dict[str, str] = {}
    share = CoreShare(storage, host, env=env, cpu_count=8, refresh_s=60, clock=lambda: now[0])
    assert share.apply() == 2
    assert env["OMP_NUM_THREADS"] == "2"
    with storage.transaction() as conn:  # two of them stop
        conn.execute(
            sa.update(workers)
            .where(workers.c.worker_id.in_(ids[:2]))
            .values(stopped_at=workers.c.heartbeat_at)
        )
    storage.close()  # a query now would fail: none is made within the minute
    for now[0] in (1.0, 30.0, 59.0):
        assert share.apply() == 2
    now[0] = 61.0
    share.storage = open_storage(storage_url)
    assert share.apply() == 4


def test_a_worker_that_trains_without_torch_never_imports_it() -> None:
    """The share goes through the environment until torch is imported: a worker whose trials
    never touch torch does not pay for importing it, and a torch imported later gets it."""
    code = (
        "import os, sys\n"
        "from search.worker.cpu_share import set_thread_share\n"
        "set_thread_share(1, os.environ)\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
        "import torch\n"
        "print(torch.get_num_threads())\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", OURS)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["1"]


def test_a_share_set_by_hpsearch_is_not_taken_for_the_users(
    storage_url: str, study_name: str
) -> None:
    """OMP_NUM_THREADS written by a worker (and inherited by its children) is recounted; one
    the user set is left alone."""
    host = f"host-{study_name[-6:]}"
    storage, _ = _on_host(storage_url, study_name, host, 2)
    env: dict[str, str] = {}
    assert share_cpu_threads(storage, host, env=env, cpu_count=8) == 4
    assert share_cpu_threads(storage, host, env=dict(env), cpu_count=16) == 8
    assert share_cpu_threads(storage, host, env={**env, "OMP_NUM_THREADS": "3"}) is None
