"""How close the dry run's memory estimate comes to what real training steps allocate.

For each configuration of the built-in digits CNN (width, batch, precision, checkpointing,
accumulation), side by side in one process:

- estimate: `trainer.memory.fit_memory` on fake tensors (no compute), the configured plan's
  peak plus the data the trainer keeps on the device;
- on a CPU, two real steps of `trainer.train`, measured two ways: torch's CPU allocator as the
  profiler reports it (every allocation and free, kernels' internal scratch included:
  independent of the dry run's accounting), and the dispatch-mode count of tensors that the
  dry run itself uses (`time_steps`' tensor peak);
- on a GPU (``--device cuda:0``), two real steps: ``torch.cuda.max_memory_allocated`` (the
  caching allocator's own count, since `train` started: data, model, state, step).

The figure is estimate / measured per configuration: above 1 the dry run was conservative,
below 1 it missed bytes (`trainer.sizes.HEADROOM`, 10%, is meant to cover those). Bytes are
deterministic: one run per configuration is enough (time is not measured here). On a CPU a
second table sets one step on its own against the allocator: what kernels allocate inside
themselves (scratch, not tensors) shows there.

    python -m bench.systems.memory_estimate                    # CPU: allocator and tensor counts
    python -m bench.systems.memory_estimate --device cuda:0    # GPU: cuda max_memory_allocated

On a GPU it then caps the caching allocator (``torch.cuda.set_per_process_memory_fraction``)
between what two of the trainer's plans need, trains, and compares the plan the trainer lands
on after its real out-of-memory errors with the one the estimate picked for that limit.
"""

from __future__ import annotations

import argparse
import platform
import sys
import threading
from dataclasses import replace
from typing import Any

import torch

from search.estimate.step_timing import time_steps
from trainer import TrainConfig, train
from trainer.memory import MemoryTarget, fit_memory
from trainer.sizes import format_size
from trainer.tasks.digits import make_task

CONFIGS: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"width": 8, "batch_size": 32}, {}),
    ({"width": 32, "batch_size": 64}, {}),
    ({"width": 64, "batch_size": 128}, {}),
    ({"width": 64, "batch_size": 128, "depth": 4}, {}),
    ({"width": 64, "batch_size": 128}, {"precision": "bf16"}),
    ({"width": 64, "batch_size": 128}, {"grad_checkpointing": True}),
    ({"width": 64, "batch_size": 128}, {"grad_accum_steps": 4}),
    ({"width": 64, "batch_size": 128, "depth": 4}, {"grad_checkpointing": True}),
    ({"width": 64, "batch_size": 128}, {"precision": "bf16", "grad_checkpointing": True}),
    ({"width": 64, "batch_size": 128}, {"optimizer": "sgd"}),
]


def allocator_peak(params: dict[str, Any], config: TrainConfig) -> int:
    """Peak bytes held by torch's CPU allocator during two real steps of `train` (from the
    profiler's allocation events: every alloc and free, in order)."""
    from torch.profiler import ProfilerActivity, profile

    stop = threading.Event()
    steps = [0]

    def progress(*_: Any) -> None:
        steps[0] += 1
        if steps[0] >= 2:
            stop.set()

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        train(make_task, params, config, device="cpu", stop=stop, progress=progress)
    return _allocation_peak(prof)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda:N")
    args = parser.parse_args()
    gpu = args.device.startswith("cuda")
    print(
        f"torch {torch.__version__}, Python {platform.python_version()}, "
        f"{torch.cuda.get_device_name(args.device) if gpu else platform.processor() or 'cpu'}"
    )
    header = ["configuration", "estimate", "measured", "estimate/measured"]
    if not gpu:
        header[2:2] = ["tensors (real)"]
        header[3] = "CPU allocator"
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    ratios = []
    for params, changes in CONFIGS:
        config = replace(TrainConfig(epochs=3, precision="fp32"), **changes)
        target = MemoryTarget.for_device(args.device, config.precision)
        estimate = fit_memory(make_task, params, config, target).configured
        label = " ".join(f"{k}={v}" for k, v in {**params, **changes}.items())
        if gpu:
            real = time_steps(make_task, params, config, device=args.device, steps=1, warmup=1)
            measured = real.peak_memory_bytes
            cells = [label, format_size(estimate.total_bytes), format_size(measured)]
        else:
            real = time_steps(make_task, params, config, device="cpu", steps=1, warmup=1)
            measured = allocator_peak(params, config)
            cells = [
                label,
                format_size(estimate.total_bytes),
                format_size(real.tensor_peak_bytes),
                format_size(measured),
            ]
        ratios.append(estimate.total_bytes / measured)
        print(" | ".join([*cells, f"{ratios[-1]:.3f}"]), flush=True)
    print(f"estimate/measured: min {min(ratios):.3f}, max {max(ratios):.3f}")
    if gpu:
        adaptation_under_a_cap(args.device)
    else:
        isolated_steps()
    return 0


def isolated_steps() -> None:
    """One forward, backward and AdamW step on its own (after a first one), above what was
    allocated before it: torch's tensors (the dry run's accounting) against the CPU allocator,
    which also sees kernels' internal scratch (what `HEADROOM` is for)."""
    print("\none step, bytes above its start | tensors | CPU allocator | tensors/allocator")
    print("--- | --- | --- | ---")
    cases = [
        ({"width": 64}, 64, False, False),
        ({"width": 64}, 64, True, False),
        ({"width": 16}, 128, False, False),
        ({"width": 64}, 32, False, True),
    ]
    for params, batch, checkpointing, bf16 in cases:
        tensors, allocator = _one_step(params, batch, checkpointing, bf16)
        label = f"width={params['width']} batch={batch}" + (" ckpt" if checkpointing else "")
        label += " bf16" if bf16 else ""
        print(
            f"{label} | {format_size(tensors)} | {format_size(allocator)} | "
            f"{tensors / allocator:.3f}",
            flush=True,
        )


def _one_step(
    params: dict[str, Any], batch: int, checkpointing: bool, bf16: bool
) -> tuple[int, int]:
    """(tensor bytes, allocator bytes) at the peak of one step, above its start."""
    from torch.profiler import ProfilerActivity, profile

    from trainer.memory.tracker import StorageTracker

    task = make_task(params)
    model, (x, y) = task.model, task.train_set.tensors
    model.grad_checkpointing = checkpointing
    inputs, targets = x[:batch].clone(), y[:batch].clone()
    optimizer = torch.optim.AdamW(model.parameters())

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            outputs = model(inputs)
        loss = task.loss_fn(outputs.float(), targets)
        del outputs
        loss.backward()
        del loss
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()  # the optimizer state exists from here on
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    tracker = StorageTracker()
    state = [t for s in optimizer.state.values() for t in s.values()]
    for tensor in (*model.parameters(), inputs, targets, *state):
        tracker.watch(tensor)
    start = tracker.peak = tracker.current
    with tracker:
        step()
    return tracker.peak - start, _allocation_peak(prof)


def _allocation_peak(prof: Any) -> int:
    """Peak of the CPU allocator's bytes above the profile's start, from its alloc/free events."""

    def walk(nodes: Any) -> Any:
        for node in nodes:
            yield node
            yield from walk(node.children)

    events = sorted(
        (
            e
            for e in walk(prof.profiler.kineto_results.experimental_event_tree())
            if str(e.tag).endswith("Allocation")
        ),
        key=lambda e: e.start_time_ns,
    )
    current = peak = 0
    for event in events:
        current += event.extra_fields.alloc_size
        peak = max(peak, current)
    return peak


def adaptation_under_a_cap(device: str) -> None:
    """Real CUDA out-of-memory errors: the plan the trainer adapts to under a capped allocator
    against the plan the estimate picks for the same limit (which keeps 10% headroom, so it
    may pick a later plan than the trainer needs)."""
    params = {"width": 256, "depth": 6, "batch_size": 512}
    config = TrainConfig(epochs=1, precision="fp32")
    target = MemoryTarget.for_device(device, "fp32")
    plans = fit_memory(make_task, params, config, target, every_plan=True).tried
    total = torch.cuda.get_device_properties(device).total_memory
    print("\ncap | estimate's plan | trainer's plan | status | trainer's peak")
    print("--- | --- | --- | --- | ---")
    for i in (1, 2, 3, 4):
        cap = (plans[i].total_bytes + plans[i - 1].total_bytes) // 2
        torch.cuda.set_per_process_memory_fraction(cap / total, device)
        try:
            limited = MemoryTarget.for_device(device, "fp32", cap)
            fitted = fit_memory(make_task, params, config, limited).fitted
            result = train(make_task, params, config, device=device)
        finally:
            torch.cuda.set_per_process_memory_fraction(1.0, device)
        trainer_plan = f"micro-batch {-(-512 // result.grad_accum_steps)} x " + (
            f"{result.grad_accum_steps}"
            + (", gradient checkpointing" if result.grad_checkpointing else "")
        )
        print(
            f"{format_size(cap)} | {fitted.plan.describe() if fitted else 'none fits'} | "
            f"{trainer_plan} | {result.status} | {format_size(result.peak_memory_bytes)}",
            flush=True,
        )


if __name__ == "__main__":
    sys.exit(main())
