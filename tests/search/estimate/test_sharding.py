"""`hpsearch estimate` for sharded trials: per-GPU bytes on N = 1, 2, 4, 8 GPUs and the fewest
that fit, checked (a) against the seed's arithmetic, with the bytes per parameter measured by
the estimate's own dry step; (b) against the bytes two real FSDP ranks hold (gloo, on the CPU);
(c) as users run it."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.multiprocessing as mp
from torch import nn

from search.estimate.sharding import largest_unit_params, per_gpu, sharded_rows
from tests.helpers import REPO
from tests.helpers.cli import hpsearch
from trainer import TrainConfig, resolve_task
from trainer.memory import MemoryTarget, fit_memory

DIGITS = REPO / "examples" / "digits.toml"


def test_7e9_parameters_with_adam_need_112_gb_and_14_gb_per_gpu_over_8() -> None:
    # Bytes per parameter of weights, gradients and AdamW state under mixed precision, as
    # the estimate measures them (a dry step on a GPU target, bf16): 4 + 4 + 8 = 16.
    def task(params: dict[str, Any]) -> Any:
        digits = resolve_task("digits")(params)
        digits.model = nn.Sequential(nn.Flatten(), nn.Linear(64, 4096), nn.Linear(4096, 10))
        return digits

    fit = fit_memory(
        task, {"batch_size": 8}, TrainConfig(epochs=1), MemoryTarget.for_gpu(2**34, "auto")
    )
    step = fit.configured
    assert step.precision == "bf16"
    n = sum(p.numel() for p in task({}).model.parameters())
    state = step.weights_bytes + step.gradients_bytes + step.optimizer_bytes
    assert state / n == pytest.approx(16, rel=1e-3)  # AdamW's step counters: a few bytes more
    per_param = {
        "weights_bytes": step.weights_bytes / n,
        "gradients_bytes": step.gradients_bytes / n,
        "optimizer_bytes": step.optimizer_bytes / n,
    }
    big = {k: round(v * 7e9) for k, v in per_param.items()}
    one = per_gpu(ranks=1, **big)
    eight = per_gpu(ranks=8, **big)
    assert one.state_bytes == pytest.approx(112e9, rel=1e-3)
    assert eight.state_bytes == pytest.approx(14e9, rel=1e-3)
    assert eight.optimizer_bytes == pytest.approx(7e9, rel=1e-3)  # Adam's 8 bytes, over 8


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_holds(rank: int, world: int, port: int, params: dict[str, Any], out: Any) -> None:
    """One FSDP rank after an optimizer step: the bytes it holds of each kind."""
    import torch.distributed as dist

    from trainer.distributed import leave_rank
    from trainer.sharding import shard_model

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    task = resolve_task("digits")(params)
    model = task.model
    shard_model(model, "fp32", torch.device("cpu"))
    optimizer = torch.optim.AdamW(model.parameters())
    inputs = torch.stack([task.train_set[i][0] for i in range(8)])
    targets = torch.tensor([task.train_set[i][1] for i in range(8)])
    task.loss_fn(model(inputs), targets).backward()
    optimizer.step()

    def local(t: torch.Tensor) -> int:
        t = t.to_local() if hasattr(t, "to_local") else t
        return t.numel() * t.element_size()

    params_ = list(model.parameters())
    held = {
        "weights_bytes": sum(local(p) for p in params_) + sum(local(b) for b in model.buffers()),
        "gradients_bytes": sum(local(p.grad) for p in params_ if p.grad is not None),
        "optimizer_bytes": sum(
            local(v) for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)
        ),
    }
    out.put((rank, held))
    leave_rank()  # exit code 0, no teardown that could abort


@pytest.mark.slow
def test_gloo_per_gpu_state_matches_what_two_fsdp_ranks_hold() -> None:
    """Multi-process (2 gloo ranks): the estimate's state per GPU against the bytes each rank
    holds. Tolerance: FSDP pads each parameter's shard to ceil(rows / N) rows, so a rank may
    hold up to one row per parameter more than 1/N; AdamW's step counters are not sharded."""
    params = {"width": 23, "batch_size": 64}
    factory = resolve_task("digits")
    step = fit_memory(
        factory, params, TrainConfig(epochs=1), MemoryTarget.for_device("cpu", "fp32")
    ).configured
    (estimate,) = sharded_rows(step, largest_unit_params(factory, params), ranks=(2,))
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    port = _free_port()
    procs = [ctx.Process(target=_rank_holds, args=(r, 2, port, params, out)) for r in range(2)]
    for p in procs:
        p.start()
    held = dict(out.get() for _ in procs)
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    model = factory(params).model
    padding = 4 * sum(p[0].numel() if p.dim() else 1 for p in model.parameters())  # a row each
    steps = 4 * len(list(model.parameters()))  # fp32 step counters, whole on every rank
    for rank, h in held.items():
        for kind in ("weights_bytes", "gradients_bytes"):
            assert abs(h[kind] - getattr(estimate, kind)) <= padding, (rank, kind)
        assert abs(h["optimizer_bytes"] - estimate.optimizer_bytes) <= 2 * padding + steps, rank
    # Together the ranks hold the whole state once (not twice, as with DDP).
    total = sum(h["weights_bytes"] + h["gradients_bytes"] for h in held.values())
    assert total == pytest.approx(step.weights_bytes + step.gradients_bytes, rel=0.05)


@pytest.mark.slow
def test_estimate_of_a_sharded_study_says_how_many_gpus(tmp_path: Path) -> None:
    config = tmp_path / "fsdp.toml"
    config.write_text(DIGITS.read_text().replace("[train]\n", '[train]\nsharding = "fsdp"\n'))
    args = ["--set", "width=64", "--set", "batch_size=128", "--device-memory", "2MiB"]
    done = hpsearch("estimate", str(config), *args, "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["sharding"] == "fsdp"
    (row,) = report["configurations"]
    rows = row["per_gpu"]
    assert [r["ranks"] for r in rows] == [1, 2, 4, 8]
    m = row["configured"]
    for r in rows:
        state = m["weights_bytes"] + m["gradients_bytes"] + m["optimizer_bytes"]
        assert r["state_bytes"] == pytest.approx(state / r["ranks"], abs=3)
        assert (r["gathered_bytes"] > 0) == (r["ranks"] > 1)  # one GPU gathers nothing
    totals = [r["total_bytes"] for r in rows]
    assert totals == sorted(totals, reverse=True)
    usable = report["target"]["usable_bytes"]
    fitting = [r["ranks"] for r in rows if r["total_bytes"] <= usable]
    assert row["smallest_gpus"] == (fitting[0] if fitting else None)
    assert row["smallest_gpus"] not in (None, 1)  # this one needs sharding, and sharding helps

    table = hpsearch("estimate", str(config), *args, cwd=tmp_path)
    lines = table.stdout.splitlines()
    at = lines.index("sharded (fsdp), given: per GPU of N GPUs")
    assert lines[at + 1].split()[:2] == ["GPUs", "weights"]
    assert [line.split()[0] for line in lines[at + 2 : at + 6]] == ["1", "2", "4", "8"]
    assert lines[at + 6] == f"smallest N: {row['smallest_gpus']} GPUs"

    plain = hpsearch("estimate", str(DIGITS), *args, "--json", cwd=tmp_path)
    assert "per_gpu" not in json.loads(plain.stdout)["configurations"][0]
