"""Local child processes (`--gpus all`, `run --workers`, compare's workers, a trial's ranks): the
parent's CUDA_VISIBLE_DEVICES entries, threads shared, and which exits are restarted. Fake GPU
counts and environments: no GPU needed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from search.worker import launcher
from search.worker.launcher import CHILD_RESTARTS, child_plans, restart_delay, visible_gpus

UUIDS = "GPU-8f6c2a1e-0000-1111-2222-333344445555,GPU-11aa22bb-6666-7777-8888-9999aaaabbbb"


@pytest.mark.parametrize(
    ("env", "count", "expected"),
    [
        ({}, 2, ["0", "1"]),
        ({"CUDA_VISIBLE_DEVICES": "2,3"}, 2, ["2", "3"]),
        ({"CUDA_VISIBLE_DEVICES": " 5, 1 "}, 2, ["5", "1"]),
        ({"CUDA_VISIBLE_DEVICES": UUIDS}, 2, UUIDS.split(",")),
        ({"CUDA_VISIBLE_DEVICES": "3,7,bad,2"}, 2, ["3", "7"]),  # CUDA stops at "bad"
        ({"CUDA_VISIBLE_DEVICES": ""}, 0, []),
    ],
    ids=["unset", "indices", "spaces", "uuids", "invalid-entry", "empty"],
)
def test_visible_gpus(env: dict[str, str], count: int, expected: list[str]) -> None:
    assert visible_gpus(env, count) == expected


def test_children_get_the_parents_visible_gpus_one_each() -> None:
    env = {"CUDA_VISIBLE_DEVICES": "2,3", "PATH": "/usr/bin"}
    plans = child_plans(["cuda:0", "cuda:1"], env, gpu_count=2, cpu_count=16)
    assert [p.env["CUDA_VISIBLE_DEVICES"] for p in plans] == ["2", "3"]
    assert [p.device for p in plans] == ["cuda:0", "cuda:0"]  # each sees its one GPU as 0
    assert [p.label for p in plans] == [
        "cuda:0 (CUDA_VISIBLE_DEVICES=2)",
        "cuda:1 (CUDA_VISIBLE_DEVICES=3)",
    ]
    assert [p.env["OMP_NUM_THREADS"] for p in plans] == ["8", "8"]  # GPU children too
    assert all(p.env["PATH"] == "/usr/bin" for p in plans)
    assert env == {"CUDA_VISIBLE_DEVICES": "2,3", "PATH": "/usr/bin"}  # the parent's untouched


def test_groups_of_gpus_per_trial_get_the_parents_entries_numbered_from_zero() -> None:
    env = {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}
    plans = child_plans(["cuda:0,1", "cuda:2,3"], env, gpu_count=4, cpu_count=8)
    assert [p.env["CUDA_VISIBLE_DEVICES"] for p in plans] == ["4,5", "6,7"]
    assert [p.device for p in plans] == ["cuda:0,1", "cuda:0,1"]
    assert plans[1].label == "cuda:2,3 (CUDA_VISIBLE_DEVICES=6,7)"


def test_uuids_pass_through_and_a_set_thread_count_is_kept() -> None:
    env = {"CUDA_VISIBLE_DEVICES": UUIDS, "OMP_NUM_THREADS": "3"}
    plans = child_plans(["cuda:1", "cuda:0"], env, gpu_count=2, cpu_count=64)
    assert [p.env["CUDA_VISIBLE_DEVICES"] for p in plans] == UUIDS.split(",")[::-1]
    assert [p.env["OMP_NUM_THREADS"] for p in plans] == ["3", "3"]


def test_cpu_children_share_the_cores_and_a_single_child_keeps_them_all() -> None:
    plans = child_plans(["cpu"] * 3, {}, gpu_count=0, cpu_count=8)
    assert [(p.device, p.env["OMP_NUM_THREADS"]) for p in plans] == [("cpu", "2")] * 3
    assert "CUDA_VISIBLE_DEVICES" not in plans[0].env
    (one,) = child_plans(["cuda:0"], {}, gpu_count=1, cpu_count=8)
    assert "OMP_NUM_THREADS" not in one.env and one.env["CUDA_VISIBLE_DEVICES"] == "0"


def test_exit_1_and_crashes_are_restarted_with_backoff_and_a_cap() -> None:
    assert [restart_delay(1, n) for n in range(CHILD_RESTARTS + 1)] == [2.0, 4.0, 8.0, None]
    assert restart_delay(-9, 0) == restart_delay(-6, 1) / 2 == 2.0  # OOM killer, abort
    for code in (0, 2, 130, -15, -2):  # done, bad input, interrupted, SIGTERM, SIGINT
        assert restart_delay(code, 0) is None


@pytest.mark.slow
def test_compare_workers_see_the_parents_gpus_and_a_crashed_one_is_restarted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workers `hpsearch compare` starts (`run_worker_processes` with a log file), under
    CUDA_VISIBLE_DEVICES=2,3 on two (fake) GPUs: real child processes that print what they
    got. compare used to give them torch's index (0 and 1: the wrong GPUs), overwrite a preset
    OMP_NUM_THREADS and never restart a crashed child."""
    child = tmp_path / "fake-python"
    child.write_text(
        "#!/bin/sh\n"
        'echo "child $CUDA_VISIBLE_DEVICES threads=$OMP_NUM_THREADS storage=$HPSEARCH_STORAGE $*"\n'
        # The child on GPU 3 crashes the first time (a CUDA error is exit 1).
        f'if [ "$CUDA_VISIBLE_DEVICES" = 3 ] && [ ! -e {tmp_path}/crashed ]; then\n'
        f"  touch {tmp_path}/crashed; exit 1\n"
        "fi\n"
    )
    child.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(child))
    monkeypatch.setattr(launcher, "gpu_count", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    devices = launcher.local_devices(None)  # compare's default: one worker per GPU
    assert devices == ["cuda:0", "cuda:1"]
    log = tmp_path / "logs" / "study.log"
    code = launcher.run_worker_processes(
        "sqlite:///x.db", "s", devices, ["--grace-s", "5"], restart_failed=True, log_path=log
    )
    assert code == 0
    lines = sorted(log.read_text().splitlines())
    assert lines == [
        "child 2 threads=3 storage=sqlite:///x.db -m search worker --study s --device cuda:0 "
        "--grace-s 5",
        "child 3 threads=3 storage=sqlite:///x.db -m search worker --study s --device cuda:0 "
        "--grace-s 5",
        "child 3 threads=3 storage=sqlite:///x.db -m search worker --study s --device cuda:0 "
        "--grace-s 5",
    ]


@pytest.mark.slow
def test_ranks_of_a_trial_group_see_the_groups_gpus_through_the_parents_list() -> None:
    env = {"CUDA_VISIBLE_DEVICES": "4,5,6,7", "OMP_NUM_THREADS": "8"}
    plans = launcher.rank_plans(["cuda:2", "cuda:3"], env, cpu_count=64)
    assert [p.env["CUDA_VISIBLE_DEVICES"] for p in plans] == ["6,7", "6,7"]
    assert [p.device for p in plans] == ["cuda:0", "cuda:1"]
    cpu = launcher.rank_plans(["cpu"] * 2, env, cpu_count=64)
    assert [(p.device, p.env["OMP_NUM_THREADS"]) for p in cpu] == [("cpu", "4")] * 2
    (alone,) = launcher.rank_plans(["cpu"], {}, cpu_count=6)
    assert alone.env["OMP_NUM_THREADS"] == "6"
