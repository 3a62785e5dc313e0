"""What only a GPU shows, checked in one command (under 10 minutes on one GPU machine):

1. speed: steps per second of the built-in digits CNN at a size where tensor cores matter
   (width 256, depth 3, batch 512), bf16, fp32 and forced fp16, with the ratio to fp32;
2. a real CUDA out-of-memory error, adapted: the caching allocator is capped
   (``torch.cuda.set_per_process_memory_fraction``) between what micro-batches of B/2 and B
   need; the trial must complete with the micro-batch halved and the same effective batch;
3. resume on another device index: ``deterministic = true``, a model with dropout (so the CUDA
   generator matters), stopped after epoch 1 on ``cuda:0`` and resumed on ``cuda:1`` (on the
   same index with one GPU): per-epoch metrics identical to an uninterrupted run;
4. ``hpsearch worker --gpus all`` under ``CUDA_VISIBLE_DEVICES`` naming two GPUs in reverse
   order: two children, each on the physical GPU its entry names (GPU UUIDs compared);
   needs two GPUs;
5. a sharded step (``[train] sharding = "fsdp"``, ``trainer.sharding``) on every GPU (up to
   8) over NCCL in bf16: a 75M-parameter MLP (1.2 GB of weights, gradients and AdamW state),
   each rank's peak of torch.cuda.max_memory_allocated against ``hpsearch estimate``'s per-GPU
   bytes for that many GPUs (passes within +25% / -50%: the estimate must not undershoot).
   With one GPU, a one-rank group (nothing sharded, the path still runs).

On a machine without CUDA it runs what a CPU can (3 on the CPU: stop, resume, identical
metrics; the ``--gpus all`` plan for ``CUDA_VISIBLE_DEVICES=2,3``; 5 on two gloo CPU ranks in
fp32 with a small MLP: the weights, gradients and optimizer state each rank holds against the
estimate's, within FSDP's padding), says the rest needs a GPU, and exits 0. Exit 1 when a
check fails.

    python -m bench.gpu.check            # prints one table; --quick: fewer timed steps
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import TensorDataset

REPO = Path(__file__).resolve().parents[2]

from search.estimate.sharding import largest_unit_params, sharded_rows  # noqa: E402
from search.estimate.step_timing import time_steps  # noqa: E402
from search.worker.launcher import child_plans  # noqa: E402
from trainer import DirectoryCheckpointStore, Task, TrainConfig, train  # noqa: E402
from trainer.memory import MemoryTarget, fit_memory  # noqa: E402
from trainer.tasks.digits import accuracy  # noqa: E402
from trainer.tasks.digits import make_task as digits_task  # noqa: E402

PROBE_DIR = "HPSEARCH_GPU_CHECK_PROBE"
"""Where probe_task's trials write which GPU they ran on (check 4)."""

Row = tuple[str, str, str, bool | None]
"""(check, result, detail, passed: True/False, None when only informational or skipped)."""


# -- tasks ------------------------------------------------------------------------------------


class WideMLP(nn.Module):
    """Activations large enough per sample that the micro-batch decides what fits."""

    def __init__(self, features: int, width: int, dropout: float) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(features, width),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(width, width),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(width, 10),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def mlp_task(params: dict[str, Any]) -> Task:
    """Synthetic 10-class data, `params["samples"]` of `params["features"]` features."""
    generator = torch.Generator().manual_seed(0)
    samples, features = int(params.get("samples", 2048)), int(params.get("features", 64))
    x = torch.randn(samples + 512, features, generator=generator)
    y = (x[:, :10] + 0.5 * torch.randn(samples + 512, 10, generator=generator)).argmax(1)
    return Task(
        model=WideMLP(features, int(params.get("width", 256)), float(params.get("dropout", 0.3))),
        train_set=TensorDataset(x[:samples], y[:samples]),
        val_set=TensorDataset(x[samples:], y[samples:]),
        loss_fn=nn.functional.cross_entropy,
        metric_fn=accuracy,
    )


def probe_task(params: dict[str, Any]) -> Task:
    """mlp_task that first writes which GPU its process sees (check 4)."""
    directory = os.environ.get(PROBE_DIR)
    if directory and torch.cuda.is_available():
        uuid = str(torch.cuda.get_device_properties(0).uuid)
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        with open(Path(directory) / f"{os.getpid()}.txt", "w") as out:
            out.write(f"{visible} {uuid}\n")
    time.sleep(3)  # long enough trials that both children get one (each writes its line)
    return mlp_task({**params, "samples": 512})


# -- checks -----------------------------------------------------------------------------------


def check_speed(device: str, steps: int) -> list[Row]:
    params = {"width": 256, "depth": 3, "batch_size": 512, "dropout": 0.0}
    rates: dict[str, float] = {}
    rows: list[Row] = []
    for precision in ("fp32", "bf16", "fp16"):
        timing = time_steps(
            digits_task,
            params,
            TrainConfig(epochs=1, precision=precision),
            device=device,
            steps=steps,
            warmup=3,
        )
        seconds = statistics.median(timing.step_seconds)
        rates[precision] = 1.0 / seconds
        spread = (
            statistics.pstdev(timing.step_seconds) / seconds if len(timing.step_seconds) > 1 else 0
        )
        ratio = rates[precision] / rates["fp32"]
        rows.append(
            (
                f"speed {precision}",
                f"{rates[precision]:.1f} steps/s ({ratio:.2f}x fp32)",
                f"ran {timing.precision}; median of {len(timing.step_seconds)} synchronized steps, "
                f"spread {spread:.0%}; {timing.device_name}",
                None,
            )
        )
    return rows


def check_out_of_memory(device: str) -> list[Row]:
    where = torch.device(device)
    batch = 8192
    params = {
        "samples": 2 * batch,
        "features": 1024,
        "width": 8192,
        "batch_size": batch,
        "dropout": 0.0,
    }
    config = TrainConfig(epochs=1, precision="fp32")

    def peak(grad_accum: int) -> int:
        torch.cuda.empty_cache()
        run = train(
            mlp_task,
            params,
            TrainConfig(epochs=1, precision="fp32", grad_accum_steps=grad_accum),
            device=device,
        )
        assert run.status == "completed", run.reason
        return run.peak_memory_bytes

    full, half = peak(1), peak(2)
    total = torch.cuda.get_device_properties(where).total_memory
    limit = (full + half) // 2
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(limit / total, where)
    try:
        with tempfile.TemporaryDirectory() as directory:
            result = train(
                mlp_task,
                params,
                config,
                device=device,
                checkpoints=DirectoryCheckpointStore(directory),
            )
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, where)
        torch.cuda.empty_cache()
    passed = (
        result.status == "completed"
        and result.grad_accum_steps >= 2
        and any(f"effective batch {batch} unchanged" in a for a in result.adapted)
    )
    detail = (
        f"peaks: micro-batch {batch} {full / 2**30:.2f} GiB, {batch // 2} {half / 2**30:.2f} GiB; "
        f"cap {limit / 2**30:.2f} GiB; {result.status}, grad_accum_steps {result.grad_accum_steps}"
        f"; {result.adapted[-1] if result.adapted else result.reason}"
    )
    return [("real CUDA out of memory", "adapted" if passed else "FAILED", detail, passed)]


def check_resume(first: str, second: str) -> list[Row]:
    params = {"width": 512, "dropout": 0.3, "batch_size": 64}
    config = TrainConfig(epochs=3, deterministic=True, seed=3)
    whole = train(mlp_task, params, config, device=first)
    with tempfile.TemporaryDirectory() as directory:
        store = DirectoryCheckpointStore(directory)
        stop = threading.Event()
        stopped = train(
            mlp_task,
            params,
            config,
            device=first,
            checkpoints=store,
            stop=stop,
            report=lambda epoch, metric: stop.set() or False,
        )
        resumed = train(mlp_task, params, config, device=second, checkpoints=store)
    passed = (
        stopped.status == "preempted"
        and resumed.status == whole.status == "completed"
        and resumed.resumed_from is not None
        and resumed.metrics == whole.metrics
        and not resumed.notes
    )
    detail = (
        f"stopped after epoch {len(stopped.metrics)} on {first}, resumed on {second} from "
        f"{resumed.resumed_from}; metrics {[round(m, 6) for m in resumed.metrics]} vs "
        f"uninterrupted {[round(m, 6) for m in whole.metrics]}"
        + (f"; notes: {resumed.notes}" if resumed.notes else "")
    )
    name = f"deterministic resume {first} -> {second}"
    return [(name, "identical" if passed else "DIFFERENT", detail, passed)]


def check_gpus_all(count: int) -> list[Row]:
    """Two children under CUDA_VISIBLE_DEVICES = the last two GPUs, reversed."""
    uuids = [str(torch.cuda.get_device_properties(i).uuid) for i in range(count)]
    visible = f"{count - 1},{count - 2}"
    with tempfile.TemporaryDirectory() as directory:
        config = Path(directory) / "probe.toml"
        config.write_text(
            '[study]\nname = "gpu-check"\nn_trials = 6\nsampler = "random"\n'
            '[pruner]\ntype = "none"\n[task]\nname = "bench.gpu.check:probe_task"\nepochs = 1\n'
            '[space]\nlr = { type = "float", low = 1e-4, high = 1e-2, log = true }\n'
        )
        env = dict(os.environ, PYTHONPATH=str(REPO), CUDA_VISIBLE_DEVICES=visible)
        env[PROBE_DIR] = directory
        env["HPSEARCH_STORAGE"] = f"sqlite:///{directory}/study.db"
        hpsearch = [sys.executable, "-m", "search"]
        subprocess.run([*hpsearch, "create", str(config)], env=env, check=True, cwd=REPO)
        run = subprocess.run(
            [*hpsearch, "worker", "--study", "gpu-check", "--gpus", "all"],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
        seen = {
            tuple(line.split())
            for probe in Path(directory).glob("*.txt")
            for line in probe.read_text().splitlines()
        }
    expected = {(str(count - 1), uuids[count - 1]), (str(count - 2), uuids[count - 2])}
    passed = run.returncode == 0 and seen == expected
    detail = (
        f"CUDA_VISIBLE_DEVICES={visible}: children saw {sorted(seen)}; expected {sorted(expected)}"
        + ("" if run.returncode == 0 else f"; exit {run.returncode}: {run.stderr[-300:]}")
    )
    return [("--gpus all, two processes", "right GPUs" if passed else "WRONG", detail, passed)]


SHARDED_STEPS = 3
"""Optimizer steps of check 5 (the peak is reached in the first; the rest show it stays)."""


def _sharded_rank(
    rank: int, devices: list[str], port: int, params: dict[str, Any], precision: str, out: Any
) -> None:
    """One rank of check 5: shard the MLP, train SHARDED_STEPS steps on its share of the
    batch, report (rank, peak bytes or None, bytes held of each kind)."""
    import torch.distributed as dist

    from trainer.distributed import leave_rank
    from trainer.sharding import shard_model

    device = torch.device(devices[rank])
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if device.type == "cuda":
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", rank=rank, world_size=len(devices), device_id=device)
    else:
        dist.init_process_group("gloo", rank=rank, world_size=len(devices))
    torch.manual_seed(0)
    task = mlp_task(params)  # built on the CPU: FSDP moves only this rank's shards
    model = task.model
    shard_model(model, precision, device)
    optimizer = torch.optim.AdamW(model.parameters(), fused=device.type == "cuda")
    x, y = task.train_set.tensors
    per_rank = int(params["batch_size"]) // len(devices)
    inputs = x[rank * per_rank : (rank + 1) * per_rank].to(device)
    targets = y[rank * per_rank : (rank + 1) * per_rank].to(device)
    for _ in range(SHARDED_STEPS):
        task.loss_fn(model(inputs).float(), targets).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)  # keep the gradients: they count in a step

    def local(t: torch.Tensor) -> int:
        t = t.to_local() if hasattr(t, "to_local") else t
        return t.numel() * t.element_size()

    held = {
        "weights_bytes": sum(local(p) for p in model.parameters()),
        "gradients_bytes": sum(local(p.grad) for p in model.parameters() if p.grad is not None),
        "optimizer_bytes": sum(
            local(v) for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)
        ),
    }
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    out.put((rank, peak, held))  # written to the pipe before it returns
    dist.barrier()  # no rank tears the group down while the other still uses it
    leave_rank()  # a teardown that aborts would fail the check with its result in


def check_sharded(devices: list[str]) -> list[Row]:
    """Check 5: per-rank memory of a sharded step against the estimate for len(devices) GPUs."""
    import socket

    import torch.multiprocessing as mp

    cuda = devices[0].startswith("cuda")
    if cuda:  # ~75M parameters: 1.2 GB of state, small activations
        params = {"features": 1024, "width": 8192, "batch_size": 64, "samples": 512}
        precision = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    else:
        params = {"features": 64, "width": 256, "batch_size": 64, "samples": 512}
        precision = "fp32"
    params["dropout"] = 0.0
    k = len(devices)
    target = MemoryTarget.for_device(devices[0], precision)
    config = TrainConfig(epochs=1, precision=precision)
    step = fit_memory(mlp_task, params, config, target, real_fallback=True).configured
    (estimate,) = sharded_rows(step, largest_unit_params(mlp_task, params), ranks=(k,))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    procs = [
        ctx.Process(target=_sharded_rank, args=(r, devices, port, params, precision, out))
        for r in range(k)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    if any(p.exitcode != 0 for p in procs):
        codes = [p.exitcode for p in procs]
        return [(f"sharded step on {k} ranks", "FAILED", f"rank exit codes {codes}", False)]
    results = sorted(out.get() for _ in procs)
    name = f"sharded (fsdp) step, {k} x {'GPU, NCCL' if cuda else 'CPU, gloo'}, {precision}"
    if cuda:
        peaks = [peak for _, peak, _ in results]
        worst = max(peaks)
        ratio = worst / estimate.total_bytes
        passed = 0.5 <= ratio <= 1.25
        detail = (
            f"peak per rank {', '.join(f'{p / 2**30:.2f}' for p in peaks)} GiB; estimate per GPU "
            f"{estimate.total_bytes / 2**30:.2f} GiB (state {estimate.state_bytes / 2**30:.2f}, "
            f"activations {estimate.activations_bytes / 2**30:.2f}, gathered "
            f"{estimate.gathered_bytes / 2**30:.2f}); one GPU alone (or each DDP rank): "
            f"{sharded_rows(step, 0, ranks=(1,))[0].total_bytes / 2**30:.2f} GiB"
        )
        return [(name, f"peak {ratio:.2f}x the estimate", detail, passed)]
    # On CPUs there is no allocator peak to read: the bytes each rank holds, within FSDP's
    # padding (a shard is rounded up to a whole row: at most one row per parameter more).
    rows = sum(p.shape[0] if p.dim() else 1 for p in mlp_task(params).model.parameters())
    slack = 4 * rows + 4 * len(list(mlp_task(params).model.parameters()))
    kinds = ("weights_bytes", "gradients_bytes", "optimizer_bytes")
    worst = max(abs(h[kind] - getattr(estimate, kind)) for _, _, h in results for kind in kinds)
    passed = worst <= 2 * slack
    held = results[0][2]
    detail = (
        f"rank 0 holds weights {held['weights_bytes']} B, gradients {held['gradients_bytes']} B,"
        f" optimizer {held['optimizer_bytes']} B; estimate {estimate.weights_bytes}, "
        f"{estimate.gradients_bytes}, {estimate.optimizer_bytes} B; worst difference {worst} B "
        f"(padding allows {2 * slack} B); GPU peak vs estimate needs CUDA"
    )
    return [(name, "as estimated" if passed else "DIFFERENT", detail, passed)]


def show_plan() -> list[Row]:
    plans = child_plans(
        ["cuda:0", "cuda:1"],
        {"CUDA_VISIBLE_DEVICES": "2,3"},
        gpu_count=2,
        cpu_count=os.cpu_count() or 1,
    )
    got = [p.env["CUDA_VISIBLE_DEVICES"] for p in plans]
    detail = "; ".join(f"{p.label} -> child --device {p.device}" for p in plans)
    return [("--gpus all plan for CUDA_VISIBLE_DEVICES=2,3", str(got), detail, got == ["2", "3"])]


# -- main -------------------------------------------------------------------------------------


def main() -> int:
    # Deterministic cuBLAS needs this before its first handle (check 3; speed is unaffected).
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer timed steps")
    args = parser.parse_args()
    started = time.perf_counter()
    rows: list[Row] = []
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {gpus} GPU(s)", flush=True)
    rows += show_plan()
    if gpus == 0:
        rows += check_resume("cpu", "cpu")
        rows += check_sharded(["cpu", "cpu"])
        rows.append(
            (
                "speed, real OOM, resume on another GPU, --gpus all, sharded peak on GPUs",
                "skipped",
                "this machine has no CUDA GPU: run this on one",
                None,
            )
        )
    else:
        rows += check_speed("cuda:0", steps=10 if args.quick else 40)
        rows += check_out_of_memory("cuda:0")
        rows += check_resume("cuda:0", "cuda:1" if gpus > 1 else "cuda:0")
        if gpus > 1:
            rows += check_gpus_all(gpus)
        else:
            rows.append(("--gpus all, two processes", "skipped", "needs two GPUs", None))
        rows += check_sharded([f"cuda:{i}" for i in range(min(gpus, 8))])
    width = max(len(r[0]) for r in rows)
    print(f"\n{'check':<{width}}  result")
    for name, result, detail, passed in rows:
        mark = {True: "ok", False: "FAIL", None: "--"}[passed]
        print(f"{name:<{width}}  {result}  [{mark}]\n{'':<{width}}    {detail}")
    print(f"\n{time.perf_counter() - started:.0f} s; command: python -m bench.gpu.check")
    if gpus == 0:
        print("This machine has no CUDA GPU: the GPU checks need one (exit 0: CPU parts ran).")
    return 1 if any(r[3] is False for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
