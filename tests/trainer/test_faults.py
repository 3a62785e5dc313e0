"""Device faults: which errors are out of memory, which poison the CUDA context, where out of
memory happened (only a training step is adapted to), and peak memory per attempt."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import trainer.loop
from tests.helpers.toy_task import ToyTask
from trainer import TrainConfig, train
from trainer.faults import classify


@pytest.mark.parametrize(
    ("error", "fault"),
    [
        (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), "out_of_memory"),
        (
            RuntimeError("CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
            "out_of_memory",
        ),
        (RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"), "out_of_memory"),
        (
            RuntimeError("cuDNN error: CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED"),
            "out_of_memory",
        ),
        (
            RuntimeError("CUDA error: out of memory\nCUDA kernel errors might be asynchronously"),
            "out_of_memory",
        ),
        (
            RuntimeError(
                "CUDA error: device-side assert triggered\nCompile with TORCH_USE_CUDA_DSA"
            ),
            "device_error",
        ),
        (RuntimeError("CUDA error: an illegal memory access was encountered"), "device_error"),
        (RuntimeError("CUDA error: unspecified launch failure"), "device_error"),
        (
            RuntimeError("CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle, ...)`"),
            "device_error",
        ),
        (torch.AcceleratorError("CUDA error: misaligned address"), "device_error"),
        (RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x16 and 8x4)"), None),
        (ValueError("CUDA error: in a ValueError, a message from the task, not CUDA"), None),
        (KeyError("label"), None),
    ],
)
def test_classify(error: BaseException, fault: str | None) -> None:
    assert classify(error) == fault


def test_classify_looks_at_the_error_a_task_wrapped() -> None:
    try:
        try:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        except RuntimeError as inner:
            raise ValueError("validation failed") from inner
    except ValueError as outer:
        assert classify(outer) == "device_error"


class Factory(ToyTask):
    """ToyTask whose models fail in a chosen place; counts the attempts (models built)."""

    def __init__(self, *, fail: str, error: BaseException, above: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fail, self.error, self.above = fail, error, above

    def __call__(self, params: dict[str, Any]) -> Any:
        if self.fail == "factory":
            raise self.error
        task = super().__call__(params)
        model, factory = task.model, self

        def forward(module: Any, args: tuple[torch.Tensor, ...]) -> None:
            training = "train" if module.training else "eval"
            if training == factory.fail and len(args[0]) > factory.above:
                raise factory.error

        model.register_forward_pre_hook(forward)
        if self.fail == "to":
            model._apply = lambda fn, *a, **k: (_ for _ in ()).throw(self.error)  # type: ignore[method-assign]
        return task


OOM = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")


@pytest.mark.parametrize(
    ("fail", "where"),
    [
        ("factory", "out of memory while building the task"),
        ("to", "out of memory while moving the model to the device"),
        ("eval", "out of memory in validation"),
    ],
)
def test_out_of_memory_outside_a_training_step_fails_without_halving(fail: str, where: str) -> None:
    task = Factory(fail=fail, error=OOM)
    result = train(task, {"batch_size": 32}, TrainConfig(epochs=2), device="cpu")
    assert result.status == "failed"
    assert result.reason.startswith(f"{where} (CUDA out of memory. Tried to allocate 8.00 GiB)")
    assert "not reduced" in result.reason
    assert result.adapted == [] and result.grad_accum_steps == 1
    assert len(task.models) == (0 if fail == "factory" else 1)  # one attempt, no retry


def test_a_cublas_allocation_failure_in_a_step_is_adapted_like_out_of_memory() -> None:
    error = RuntimeError("CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`")
    task = Factory(fail="train", error=error, above=8)
    result = train(task, {"batch_size": 32}, TrainConfig(epochs=2), device="cpu")
    assert result.status == "completed" and result.epochs_run == 2
    # checkpointing first (ToyModel has the switch, it does not help), then 32 -> 16 -> 8
    assert result.grad_accum_steps == 4 and result.grad_checkpointing
    assert len(result.adapted) == 3 and "CUBLAS_STATUS_ALLOC_FAILED" in result.adapted[-1]
    assert "effective batch 32 unchanged" in result.adapted[-1]


@pytest.mark.parametrize("fail", ["train", "eval"])
def test_a_cuda_error_ends_the_run_with_device_error_and_no_retry(fail: str) -> None:
    error = RuntimeError("CUDA error: an illegal memory access was encountered")
    task = Factory(fail=fail, error=error)
    result = train(task, {"batch_size": 32}, TrainConfig(epochs=2), device="cpu")
    assert result.status == "device_error"
    assert result.reason == "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert result.traceback and len(task.models) == 1 and result.adapted == []


def test_peak_memory_is_that_of_the_last_attempt(monkeypatch: Any) -> None:
    class Meter:
        """A fake device's peak: the largest training batch since the last reset."""

        peak = 0

        def reset(self, device: torch.device) -> None:
            self.peak = 0

        def read(self, device: torch.device) -> tuple[int, str]:
            return self.peak, "fake_peak"

    meter = Meter()
    monkeypatch.setattr(trainer.loop, "reset_peak_memory", meter.reset)
    monkeypatch.setattr(trainer.loop, "peak_memory", meter.read)

    class Measured(ToyTask):
        def __call__(self, params: dict[str, Any]) -> Any:
            task = super().__call__(params)

            def record(module: Any, args: tuple[torch.Tensor, ...]) -> None:
                if module.training:
                    meter.peak = max(meter.peak, len(args[0]))

            # Registered before ToyModel's own check raises out of memory above 16 samples.
            task.model.register_forward_pre_hook(record)
            return task

    result = train(
        Measured(oom_above={"batch": 16}), {"batch_size": 32}, TrainConfig(epochs=1), device="cpu"
    )
    assert result.status == "completed" and result.grad_accum_steps == 2
    assert result.peak_memory_bytes == 16  # not the failed attempts' 32
    assert result.peak_memory_kind == "fake_peak"


def test_gpu_settings_policy_on_a_cuda_device_object() -> None:
    # torch.backends switches can be set without a GPU: the policy itself is checked here.
    from trainer.gpu_settings import apply_gpu_settings

    try:
        fast = apply_gpu_settings(torch.device("cuda", 0), "bf16", deterministic=False)
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.benchmark
        assert "TF32 on" in fast and "benchmark on" in fast
        exact = apply_gpu_settings(torch.device("cuda", 0), "fp32", deterministic=True)
        assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.benchmark
        assert torch.backends.cudnn.deterministic and torch.are_deterministic_algorithms_enabled()
        assert "TF32 off" in exact and "deterministic" in exact
    finally:
        torch.use_deterministic_algorithms(False)
        torch.backends.cudnn.deterministic = torch.backends.cudnn.benchmark = False
