"""Seconds per epoch of `trainer.train` against a plain hand-written PyTorch loop.

Both train the built-in digits CNN on the same preloaded tensors, with the same optimizer
(AdamW), learning-rate schedule (warmup + cosine, stepped every batch), batch size and
precision, and both score the validation set after every epoch. The plain loop is the textbook
one (zero_grad, forward, backward, step) over a fresh permutation per epoch; the trainer adds
accelerate's accumulate/backward wrappers, the divergence check, the data-order bookkeeping
and its per-step stop/checkpoint checks (no checkpoint store, as when tuning without one).

They run side by side in one process, alternating (the order flips every repeat so slow drift
of the machine does not favour one). The figure is the steady-state time per epoch: the median
of the epoch times after epoch 1, so one-time setup (task, accelerator, first-touch
allocations) is left out of both. Wall-clock seconds are the figure; the process CPU seconds
per epoch are printed too, being less disturbed by other work on a shared machine.

    python -m bench.systems.trainer_overhead                    # fp32, width 64, depth 3, batch 64
    python -m bench.systems.trainer_overhead --precision bf16   # both loops under bf16 autocast
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import platform
import statistics
import time

import torch
import torch.nn.functional as F

from trainer import TrainConfig, train
from trainer.loop import WARMUP_FRACTION
from trainer.tasks.digits import make_task


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _per_epoch(epoch_ends: list[tuple[float, float]]) -> tuple[float, float]:
    """Median (wall, CPU) seconds of the epochs after the first."""
    pairs = list(itertools.pairwise(epoch_ends))
    return (
        statistics.median(b[0] - a[0] for a, b in pairs),
        statistics.median(b[1] - a[1] for a, b in pairs),
    )


def plain_loop(params: dict, epochs: int, seed: int, precision: str) -> tuple[float, float]:
    """The textbook loop; returns steady-state (wall, CPU) seconds per epoch."""
    torch.manual_seed(seed)
    task = make_task(params)
    model = task.model
    x_train, y_train = task.train_set.tensors
    x_val, y_val = task.val_set.tensors
    batch = params["batch_size"]
    # The trainer's cut of an epoch: len // batch steps, the leftover samples spread one each
    # over the first steps (so both loops see every sample, in as many optimizer steps).
    steps = len(y_train) // batch
    base, extra = divmod(len(y_train), steps)
    ends = torch.tensor([base + (i < extra) for i in range(steps)]).cumsum(0).tolist()
    optimizer = torch.optim.AdamW(model.parameters(), lr=params["lr"], weight_decay=0.0)
    total = epochs * steps
    warmup = max(1, round(WARMUP_FRACTION * total))
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: (
            (s + 1) / warmup
            if s < warmup
            else 0.5 * (1 + math.cos(math.pi * min(1.0, (s - warmup) / max(1, total - warmup))))
        ),
    )
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")
    generator = torch.Generator().manual_seed(seed)
    epoch_ends = []
    for _ in range(epochs):
        model.train()
        order = torch.randperm(len(y_train), generator=generator)
        for start, end in zip([0, *ends[:-1]], ends, strict=True):
            index = order[start:end]
            optimizer.zero_grad()
            with autocast:
                loss = F.cross_entropy(model(x_train[index]), y_train[index])
            loss.backward()
            optimizer.step()
            scheduler.step()
        model.eval()
        with torch.no_grad(), autocast:
            outputs = torch.cat([model(x_val[a : a + batch]) for a in range(0, len(y_val), batch)])
        task.metric_fn(outputs.float(), y_val)
        epoch_ends.append(_clock())
    return _per_epoch(epoch_ends)


def trainer_loop(params: dict, epochs: int, seed: int, precision: str) -> tuple[float, float]:
    """`trainer.train` on the same work; returns steady-state (wall, CPU) seconds per epoch."""
    epoch_ends: list[tuple[float, float]] = []
    result = train(
        make_task,
        params,
        TrainConfig(epochs=epochs, precision=precision, seed=seed),
        report=lambda epoch, metric: epoch_ends.append(_clock()) and False,
        device="cpu",
    )
    assert result.status == "completed", result.reason
    return _per_epoch(epoch_ends)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--width", type=int, default=64, help="conv channels")
    parser.add_argument("--depth", type=int, default=3, help="conv blocks")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    params = {
        "lr": 3e-3,
        "batch_size": args.batch_size,
        "width": args.width,
        "depth": args.depth,
        "dropout": 0.1,
    }
    runners = {"plain": plain_loop, "trainer": trainer_loop}
    wall: dict[str, list[float]] = {name: [] for name in runners}
    cpu: dict[str, list[float]] = {name: [] for name in runners}
    trainer_loop(params, 2, 0, args.precision)  # warm-up: imports, first-touch allocations
    for repeat in range(args.repeats):
        names = list(runners) if repeat % 2 == 0 else list(reversed(runners))
        for name in names:
            seconds, cpu_seconds = runners[name](params, args.epochs, repeat, args.precision)
            wall[name].append(seconds)
            cpu[name].append(cpu_seconds)

    n_params = sum(p.numel() for p in make_task(params).model.parameters())
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, "
        f"{torch.get_num_threads()} torch threads, torch {torch.__version__}"
    )
    print(
        f"model: digits CNN width {args.width}, depth {args.depth}, {n_params:,} parameters; "
        f"batch {args.batch_size}, {args.precision}, {args.epochs} epochs x {args.repeats} "
        "repeats (seed = repeat)"
    )
    for name in runners:
        print(
            f"{name:8s} {statistics.mean(wall[name]):.4f} s/epoch "
            f"(sd {statistics.stdev(wall[name]):.4f}); "
            f"CPU {statistics.mean(cpu[name]):.4f} s/epoch (sd {statistics.stdev(cpu[name]):.4f})"
        )
    for label, seconds in (("wall", wall), ("CPU", cpu)):
        ratios = [t / p for t, p in zip(seconds["trainer"], seconds["plain"], strict=True)]
        print(
            f"ratio trainer/plain ({label}): mean {statistics.mean(ratios):.3f}, "
            f"sd {statistics.stdev(ratios):.3f}, median {statistics.median(ratios):.3f}, "
            f"min {min(ratios):.3f}, max {max(ratios):.3f}"
        )


if __name__ == "__main__":
    main()
