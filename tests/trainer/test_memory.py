"""trainer.memory: the dry run's bytes against known arithmetic, and against real steps."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from search.estimate.step_timing import time_steps
from trainer import Task, TrainConfig, resolve_task
from trainer.memory import (
    MemoryCheckError,
    MemoryPlan,
    MemoryTarget,
    adaptation_plans,
    check_memory,
    fit_memory,
)
from trainer.sizes import format_size, parse_size

CPU = MemoryTarget.for_device("cpu", "fp32")
digits = resolve_task("digits")


def _task(model: nn.Module, features: int, classes: int, samples: int = 256) -> Task:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(samples, features, generator=generator)
    y = torch.randint(0, classes, (samples,), generator=generator)
    return Task(
        model=model,
        train_set=TensorDataset(x, y),
        val_set=TensorDataset(x[:8], y[:8]),
        loss_fn=F.cross_entropy,
        metric_fn=lambda outputs, targets: 0.0,
    )


def linear_task(params: dict[str, Any]) -> Task:
    """One nn.Linear(1000, 100): 100,100 parameters."""
    return _task(nn.Linear(1000, 100), 1000, 100)


def mlp_task(params: dict[str, Any]) -> Task:
    """64 -> 256 -> 256 -> 10 with ReLUs: weight matrices of 84,480 elements."""
    model = nn.Sequential(
        nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)
    )
    return _task(model, 64, 10)


def measure(factory: Any, target: MemoryTarget = CPU, **changes: Any) -> Any:
    params = {"batch_size": changes.pop("batch_size", 32), **changes.pop("params", {})}
    return fit_memory(factory, params, TrainConfig(epochs=1, **changes), target).configured


def test_a_linear_layer_keeps_exactly_weights_gradients_and_two_adam_moments() -> None:
    m = measure(linear_task)
    weights = (1000 * 100 + 100) * 4
    assert m.weights_bytes == weights
    assert m.gradients_bytes == weights
    # exp_avg and exp_avg_sq per parameter tensor, and a float32 step counter for each of two.
    assert m.optimizer_bytes == 2 * weights + 2 * 4
    # The 16 bytes per parameter of Adam in fp32, before activations.
    per_param = (m.weights_bytes + m.gradients_bytes + m.optimizer_bytes) / 100_100
    assert per_param == pytest.approx(16, abs=1e-3)
    # SGD with momentum keeps one buffer per parameter.
    assert measure(linear_task, optimizer="sgd").optimizer_bytes == weights
    # The data the trainer keeps: the train set, its shuffled copy, the validation set.
    assert m.data_bytes == 2 * (256 * 1000 * 4 + 256 * 8) + (8 * 1000 * 4 + 8 * 8)
    assert m.measured_on == "fake cpu"
    assert m.weights_bytes + m.gradients_bytes + m.optimizer_bytes < m.peak_bytes


def test_a_gpu_target_rounds_every_tensor_to_the_caching_allocators_512_bytes() -> None:
    m = measure(linear_task, MemoryTarget.for_gpu(parse_size("80GB"), "fp32"))
    weight, bias = 400_384, 512  # 400,000 and 400 bytes, rounded up to 512
    assert m.weights_bytes == m.gradients_bytes == weight + bias
    # Two moments each; AdamW keeps its step counters on the CPU when it trains on a GPU.
    assert m.optimizer_bytes == 2 * (weight + bias)


def test_activations_grow_linearly_with_the_micro_batch() -> None:
    sizes = (8, 16, 32, 64)
    activations = [measure(linear_task, batch_size=b).activations_bytes for b in sizes]
    per_sample = (activations[1] - activations[0]) / 8
    # input (1000 floats), output, its gradient and the softmax (100 floats each), the label
    assert per_sample == 1000 * 4 + 3 * 100 * 4 + 8
    for b, a in zip(sizes, activations, strict=True):
        assert a == activations[0] + per_sample * (b - 8)
    # Accumulation: micro-batches of a quarter keep about a quarter of the activations (plus
    # one parameter's incoming gradient, added into the accumulated one).
    digits_params = {"params": {"width": 64}, "batch_size": 64}
    whole = measure(digits, **digits_params)
    quarters = measure(digits, **digits_params, grad_accum_steps=4)
    assert quarters.plan.micro_batch == 16 and quarters.micro_batch_samples == 17
    assert quarters.activations_bytes < 0.3 * whole.activations_bytes
    assert quarters.weights_bytes == whole.weights_bytes
    assert quarters.peak_bytes < 0.4 * whole.peak_bytes


def test_autocast_keeps_fp32_weights_gradients_and_state_and_halves_activations() -> None:
    fp32 = [measure(mlp_task, batch_size=b) for b in (16, 64)]
    bf16 = [
        measure(mlp_task, MemoryTarget.for_device("cpu", "bf16"), batch_size=b) for b in (16, 64)
    ]
    for a, b in zip(fp32, bf16, strict=True):
        assert b.precision == "bf16"
        # No halving of what Adam keeps: the weights stay fp32 (the master copy), and so do
        # their gradients and moments.
        assert (b.weights_bytes, b.gradients_bytes, b.optimizer_bytes) == (
            a.weights_bytes,
            a.gradients_bytes,
            a.optimizer_bytes,
        )

    def slope(pair: list[Any]) -> float:
        return (pair[1].activations_bytes - pair[0].activations_bytes) / 48

    assert slope(bf16) < 0.6 * slope(fp32)  # per sample: the casted activations are bf16
    # ...but the forward's bf16 copies of the weight matrices (2 bytes each) are saved for
    # the backward: a cost that does not depend on the micro-batch.
    intercept = [pair[0].activations_bytes - 16 * slope(pair) for pair in (fp32, bf16)]
    assert intercept[1] - intercept[0] >= 2 * (64 * 256 + 256 * 256 + 256 * 10)


def test_checkpointing_reduces_the_digits_cnns_activations() -> None:
    params = {"params": {"width": 64}, "batch_size": 64}
    plain = measure(digits, **params)
    checkpointed = measure(digits, **params, grad_checkpointing=True)
    assert checkpointed.plan.grad_checkpointing
    assert checkpointed.activations_bytes < 0.75 * plain.activations_bytes
    assert checkpointed.peak_bytes < plain.peak_bytes
    assert checkpointed.weights_bytes == plain.weights_bytes == 48_074 * 4


@pytest.mark.slow
def test_the_dry_run_matches_torch_tensors_of_real_training_steps() -> None:
    """Two real steps of the trainer, every tensor counted, against the dry run's estimate."""
    params = {"width": 64, "batch_size": 64}
    for changes in ({}, {"grad_checkpointing": True}, {"grad_accum_steps": 4}):
        config = TrainConfig(epochs=1, **changes)
        real = time_steps(digits, params, config, device="cpu", steps=1, warmup=1)
        assert real.status == "preempted" and real.tensor_peak_bytes is not None
        estimate = fit_memory(digits, params, config, CPU).configured.total_bytes
        assert estimate == pytest.approx(real.tensor_peak_bytes, rel=0.01), changes


def test_a_task_that_cannot_run_on_fake_tensors_is_measured_on_real_ones() -> None:
    class Branching(nn.Module):
        def __init__(self, inner: nn.Module) -> None:
            super().__init__()
            self.inner = inner
            self.grad_checkpointing = False

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.abs().sum().item() < 0:  # a branch on a value: no fake tensor has one
                raise AssertionError("unreachable")
            return self.inner(x)

    def branching(params: dict[str, Any]) -> Task:
        task = mlp_task(params)
        task.model = Branching(task.model)
        return task

    fake = fit_memory(mlp_task, {"batch_size": 32}, TrainConfig(epochs=1), CPU)
    real = fit_memory(branching, {"batch_size": 32}, TrainConfig(epochs=1), CPU)
    assert fake.configured.measured_on == "fake cpu" and not fake.notes
    assert real.configured.measured_on == "cpu"
    assert "real tensors" in real.notes[0] and "fake tensors" in real.notes[0]
    assert real.configured.weights_bytes == fake.configured.weights_bytes
    assert real.configured.peak_bytes == pytest.approx(fake.configured.peak_bytes, abs=64)
    with pytest.raises(MemoryCheckError, match="cannot run on fake tensors"):
        fit_memory(branching, {"batch_size": 32}, TrainConfig(epochs=1), CPU, real_fallback=False)


def test_plans_follow_the_trainers_order_of_adaptation() -> None:
    def described(*args: Any) -> list[str]:
        return [plan.describe() for plan in adaptation_plans(*args)]

    assert described(8, 1, False, True) == [
        "micro-batch 8 x 1",
        "micro-batch 8 x 1, gradient checkpointing",
        "micro-batch 4 x 2, gradient checkpointing",
        "micro-batch 2 x 4, gradient checkpointing",
        "micro-batch 1 x 8, gradient checkpointing",
    ]
    # No checkpointing switch: the model trains without it, whatever was asked.
    assert described(6, 2, True, False) == [
        "micro-batch 3 x 2",
        "micro-batch 2 x 4",
        "micro-batch 1 x 6",
    ]
    assert MemoryPlan(batch_size=6, grad_accum_steps=4, grad_checkpointing=False).micro_batch == 2


def test_a_fit_names_the_first_plan_that_fits_or_why_none_does() -> None:
    params = {"width": 64, "batch_size": 64}
    every = fit_memory(digits, params, TrainConfig(epochs=1), CPU, every_plan=True).tried
    totals = [m.total_bytes for m in every]
    assert totals == sorted(totals, reverse=True)  # each adaptation needs less

    def fit_in(limit: int) -> Any:
        target = MemoryTarget.for_device("cpu", "fp32", limit)
        return fit_memory(digits, params, TrainConfig(epochs=1), target)

    roomy = fit_in(2 * totals[0])
    assert roomy.fits and roomy.verdict == "fits as configured" and len(roomy.tried) == 1
    # Just enough for the fourth plan (micro-batch 16 x 4 with checkpointing), after headroom.
    snug = fit_in(int(totals[3] / 0.9) + 1)
    assert snug.fits and snug.fitted is snug.tried[3] and len(snug.tried) == 4
    assert snug.verdict == "fits with micro-batch 16 x 4, gradient checkpointing"
    tight = fit_in(totals[-1])  # the last plan's bytes, but not its headroom
    assert tight.fits is False and tight.fitted is None and len(tight.tried) == len(every)
    assert tight.reason.startswith("does not fit in ")
    assert "even micro-batch 1 x 64, gradient checkpointing needs" in tight.reason
    assert "\n" not in tight.reason
    # The worker's check: nothing to check against on a CPU without a limit.
    assert check_memory(digits, params, TrainConfig(epochs=1), device="cpu") is None
    refused = check_memory(
        digits, params, TrainConfig(epochs=1), device="cpu", limit_bytes=totals[-1]
    )
    assert refused is not None and refused.fits is False


def test_sizes_are_read_in_decimal_or_binary_units() -> None:
    assert parse_size("80GB") == 80 * 10**9
    assert parse_size("24GiB") == 24 * 2**30
    assert parse_size("512 MiB") == 512 * 2**20
    assert parse_size("1.5gib") == 3 * 2**29
    assert parse_size("1000") == 1000
    for bad in ("80 gigs", "", "GB", "-1GB", "0", "1e9"):
        with pytest.raises(ValueError, match="memory size"):
            parse_size(bad)
    assert format_size(192_296) == "188 KiB"
    assert format_size(3 * 2**29) == "1.50 GiB"
    assert format_size(10) == "10 B"


def test_a_model_becomes_fake_parameters_on_another_device() -> None:
    """The GPU path's mechanism, on fake "meta" tensors (no GPU here): new fake Parameters on
    the device, gradients there, AdamW's step counters left on the CPU (not counted)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from trainer.memory.dry_run import fake_model
    from trainer.memory.tracker import StorageTracker

    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8))
    model[1].weight = model[0].weight  # tied
    fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
    fake_model(model, fake_mode, "meta")
    parameters = list(model.parameters())
    assert len(parameters) == 3  # the tied weight once
    assert all(
        isinstance(p, nn.Parameter) and p.is_leaf and p.device.type == "meta" for p in parameters
    )
    tracker = StorageTracker(device_type="meta")
    for p in parameters:
        tracker.watch(p)
    with fake_mode, tracker:
        model(torch.ones(2, 8, device="meta")).sum().backward()
        optimizer = torch.optim.AdamW(parameters, foreach=True)
        optimizer.step()
    assert all(p.grad is not None and p.grad.device.type == "meta" for p in parameters)
    steps = [tracker.watch(s["step"]) for s in optimizer.state.values()]
    moments = [tracker.watch(s["exp_avg"]) for s in optimizer.state.values()]
    assert tracker.total(steps) == 0 and set(steps) <= tracker.elsewhere
    assert tracker.total(moments) == (64 + 8 + 8) * 4


@pytest.mark.parametrize(
    ("cuda_build", "says"),
    [(None, "this torch has no CUDA (a CPU-only build)"), ("12.4", "no GPU is visible")],
)
def test_a_gpu_target_on_a_machine_without_one_says_why(
    cuda_build: str | None, says: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CUDA build on a machine without a GPU is not "a torch without CUDA"."""
    monkeypatch.setattr(torch.version, "cuda", cuda_build)
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    target = MemoryTarget.for_gpu(parse_size("80GB"), "fp32")
    fit = fit_memory(linear_task, {"batch_size": 32}, TrainConfig(epochs=1), target)
    assert any(note.startswith(says) for note in fit.notes), fit.notes
