"""The dry run (`fit_memory`): the task is built as the trainer builds it (on the CPU: that needs
the host memory of its weights), then its model and one micro-batch become fake tensors
(torch's FakeTensorMode: shapes, dtypes and devices, no data) and the trainer's step runs on
them: the forward under the trial's autocast with the outputs cast back to fp32 (accelerate's
``prepare_model``), the loss divided by the accumulation (``accelerator.backward``), the
backward, the optimizer step - twice, and the second is measured, with the optimizer state
already there and, with accumulation, the gradients of one micro-batch alive during the next.
A dispatch mode (`trainer.memory.tracker.StorageTracker`) sees every tensor storage torch
creates, and a weak reference tells when it is freed; replayed in order, they give the peak and
its parts. Nothing is computed and nothing is allocated. A task whose code cannot run on fake
tensors (a branch on a tensor's value, an op without a fake kernel) is measured the same way on
real tensors on the CPU, where allowed.

`adaptation_plans` replays the trainer's own out-of-memory decisions
(`trainer.step.MemoryAdaptation`); the optimizer is the trainer's (`trainer.step.make_optimizer`)
and each micro-batch is the trainer's `trainer.step.micro_step`.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import torch
from accelerate.utils import convert_to_fp32
from torch.utils._pytree import tree_leaves, tree_map
from torch.utils.data import Dataset, TensorDataset, default_collate

from trainer.config import DEFAULT_BATCH_SIZE, DEFAULT_LR, DEFAULT_WEIGHT_DECAY, TrainConfig
from trainer.data import PRELOAD_FRACTION_OF_FREE_GPU_MEMORY
from trainer.faults import first_line
from trainer.grad_checkpointing import can_checkpoint, set_grad_checkpointing
from trainer.memory.tracker import CUDA_BLOCK, StorageTracker
from trainer.memory.types import MemoryCheckError, MemoryFit, MemoryPlan, MemoryTarget, StepMemory
from trainer.step import MemoryAdaptation, make_optimizer, micro_step
from trainer.task import Task, TaskFactory

__all__ = ["adaptation_plans", "check_memory", "fake_model", "fit_memory"]

_AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}


def adaptation_plans(
    batch_size: int, grad_accum_steps: int, grad_checkpointing: bool, can_checkpoint: bool
) -> Iterator[MemoryPlan]:
    """The plans in the order the trainer tries them after out-of-memory errors: as configured,
    then its own decisions (`MemoryAdaptation.after_out_of_memory`: gradient checkpointing if
    the model has the switch, then half the micro-batch and twice the accumulation, down to
    micro-batches of 1)."""
    # As `trainer.train` starts a run: no more micro-batches than samples; checkpointing only
    # where the model has the switch.
    fit = MemoryAdaptation(
        grad_accum_steps=min(grad_accum_steps, batch_size),
        grad_checkpointing=grad_checkpointing and can_checkpoint,
        model_can_checkpoint=can_checkpoint,
    )
    while True:
        yield MemoryPlan(
            batch_size=batch_size,
            grad_accum_steps=fit.grad_accum_steps,
            grad_checkpointing=fit.grad_checkpointing,
        )
        if fit.after_out_of_memory("dry run", batch_size) is None:
            return


def fit_memory(
    task_factory: TaskFactory,
    params: dict[str, Any],
    config: TrainConfig,
    target: MemoryTarget,
    *,
    real_fallback: bool = True,
    every_plan: bool = False,
) -> MemoryFit:
    """Measure the configured plan, then (when it does not fit) the trainer's next plans until
    one fits; with `every_plan`, all of them.

    Args:
        task_factory: builds the model and data from `params` (called once, on the CPU).
        params: the trial's hyperparameters (``batch_size`` is the effective batch).
        config: precision comes from `target`; accumulation, checkpointing and the optimizer
            from here.
        target: the device, its precision and its memory.
        real_fallback: if the task cannot run on fake tensors, measure it on real ones on the
            CPU (compute and memory of one real step); else raise `MemoryCheckError`.
        every_plan: measure every plan, not only up to the first that fits.

    Raises MemoryCheckError (one line) when the step cannot be measured, e.g. the task's
    factory or forward fails.
    """
    batch_size = int(params.get("batch_size", DEFAULT_BATCH_SIZE))
    run = _DryRun(task_factory, params, config, target, real_fallback=real_fallback)
    plans = adaptation_plans(
        batch_size, config.grad_accum_steps, config.grad_checkpointing, run.can_checkpoint
    )
    tried: list[StepMemory] = []
    usable = target.usable_bytes
    for plan in plans:
        tried.append(run.measure(plan))
        if not every_plan and (usable is None or tried[-1].total_bytes <= usable):
            break
    return MemoryFit(
        target=target,
        configured=tried[0],
        tried=tried,
        can_checkpoint=run.can_checkpoint,
        notes=run.notes,
    )


def check_memory(
    task_factory: TaskFactory,
    params: dict[str, Any],
    config: TrainConfig,
    *,
    device: str | None,
    limit_bytes: int | None = None,
) -> MemoryFit | None:
    """The check before a trial trains: does it fit `device`, as configured or with one of the
    trainer's adaptations? `MemoryFit.fits` False: no adaptation helps, do not train it.

    The limit is `limit_bytes` if given, else a GPU's free memory now. None where there is
    nothing to check against: a CPU without a given limit (the machine's memory is shared with
    everything else on it; a run that outgrows it is swapped or killed by the kernel).

    A configuration that fits only with an adaptation is not changed here: on a GPU the
    trainer adapts after its first out-of-memory error; on a CPU nothing enforces the limit.

    Raises MemoryCheckError when the step cannot be measured; the trainer then reports the
    task's own errors better than a dry run can. On a GPU the dry run uses fake tensors only
    (a real CPU run of a GPU-sized step would take too long); on a CPU, real ones if needed.
    """
    try:
        target = MemoryTarget.for_device(device, config.precision, limit_bytes)
    except ValueError as exc:
        raise MemoryCheckError(str(exc)) from None
    if target.limit_bytes is None:
        return None
    return fit_memory(
        task_factory, params, config, target, real_fallback=target.device_type == "cpu"
    )


class _DryRun:
    """One configuration's task, measured plan after plan (the model is built once)."""

    def __init__(
        self,
        task_factory: TaskFactory,
        params: dict[str, Any],
        config: TrainConfig,
        target: MemoryTarget,
        *,
        real_fallback: bool,
    ) -> None:
        self.task_factory, self.params, self.config, self.target = (
            task_factory,
            params,
            config,
            target,
        )
        self.real_fallback = real_fallback
        self.notes: list[str] = []
        self.task = self._build()
        self.can_checkpoint = can_checkpoint(self.task.model)
        batch_size = int(params.get("batch_size", DEFAULT_BATCH_SIZE))
        self.step_size = _largest_step(self.task.train_set, batch_size)
        self.data_bytes = _data_bytes(self.task, target)
        # Fake tensors live on the target's kind of device where this torch has it: a GPU's
        # autocast policy and the optimizer it gets there (`make_optimizer`: fused AdamW,
        # foreach SGD) are then the real ones.
        self.fake_device = "cpu"
        if target.device_type == "cuda":
            if torch.cuda.is_available():
                self.fake_device = "cuda"
            else:
                self.notes.append(
                    f"{_why_no_cuda()}: fake CPU tensors stand in for the GPU's, with the "
                    "CPU's autocast (it casts the same matmuls, linears and convolutions)"
                )
        self.fake_mode: Any = None  # made on the first measurement
        self.real = False

    def _build(self) -> Task:
        try:
            return self.task_factory(dict(self.params))
        except Exception as exc:
            raise MemoryCheckError(
                f"the task's factory failed: {type(exc).__name__}: {first_line(exc)}"
            ) from exc

    def measure(self, plan: MemoryPlan) -> StepMemory:
        if not self.real:
            try:
                return self._measure(plan, fake=True)
            except MemoryCheckError:
                raise
            except Exception as exc:
                why = f"{type(exc).__name__}: {first_line(exc, 120)}"
                if not self.real_fallback:
                    raise MemoryCheckError(
                        f"the task's step cannot run on fake tensors ({why})"
                    ) from exc
                self.notes.append(
                    f"measured on real tensors on the CPU: the task's step cannot run on fake "
                    f"tensors ({why})"
                )
                self.real = True
                self.task = self._build()  # the failed attempt left fake tensors in the model
        try:
            return self._measure(plan, fake=False)
        except Exception as exc:
            raise MemoryCheckError(
                f"the task's training step failed: {type(exc).__name__}: {first_line(exc)}"
            ) from exc

    def _measure(self, plan: MemoryPlan, *, fake: bool) -> StepMemory:
        model, target = self.task.model, self.target
        samples = math.ceil(self.step_size / plan.grad_accum_steps)
        batch = _micro_batch(self.task.train_set, samples)
        device = "cpu"
        if fake:
            if self.fake_mode is None:
                # a private torch module, loaded only for a dry run
                from torch._subclasses.fake_tensor import FakeTensorMode

                # Tensors a model keeps outside its parameters and buffers become fake on use.
                self.fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
                try:
                    fake_model(model, self.fake_mode, self.fake_device)
                except Exception as exc:
                    if self.fake_device == "cpu":
                        raise
                    self.notes.append(
                        f"fake {self.fake_device} tensors failed ({type(exc).__name__}: "
                        f"{first_line(exc, 120)}): fake CPU tensors stand in, with the "
                        "CPU's autocast"
                    )
                    self.fake_device = "cpu"
                    self.task = self._build()
                    model = self.task.model
                    fake_model(model, self.fake_mode, "cpu")
            device = self.fake_device
            batch = tree_map(
                lambda t: self.fake_mode.from_tensor(t) if isinstance(t, torch.Tensor) else t,
                batch,
            )
        set_grad_checkpointing(model, plan.grad_checkpointing)
        model.train()
        model.zero_grad(set_to_none=True)
        gpu = target.device_type == "cuda"
        tracker = StorageTracker(round_to=CUDA_BLOCK if gpu else 1, device_type=device)
        parameters = list(model.parameters())
        weights = [tracker.watch(t) for t in (*parameters, *model.buffers())]
        autocast = _AUTOCAST_DTYPES[target.precision]
        loss_fn = self.task.loss_fn
        micro_batches = min(plan.grad_accum_steps, 2)  # the second has the first's gradients

        def forward(inputs: Any) -> Any:
            """The model as accelerate's ``prepare_model`` wraps it: autocast, outputs in fp32."""
            if autocast is None:
                return model(inputs)
            with torch.autocast(device, dtype=autocast):
                outputs = model(inputs)
            return convert_to_fp32(outputs)

        def backward(loss: torch.Tensor) -> None:
            """``accelerator.backward``: the loss divided by the accumulation."""
            (loss / plan.grad_accum_steps).backward()

        with self.fake_mode if fake else contextlib.nullcontext(), tracker:
            inputs, targets = tree_map(
                lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, batch
            )
            for t in tree_leaves((inputs, targets)):
                if isinstance(t, torch.Tensor):
                    tracker.watch(t)
            optimizer = make_optimizer(
                self.config.optimizer,
                parameters,
                float(self.params.get("lr", DEFAULT_LR)),
                float(self.params.get("weight_decay", DEFAULT_WEIGHT_DECAY)),
                torch.device(device),
            )
            for iteration in range(2):
                if iteration == 1:
                    start = tracker.mark()
                for _ in range(micro_batches):
                    loss = micro_step(forward, loss_fn, inputs, targets, backward)
                    del loss
                gradients = [tracker.watch(p.grad) for p in parameters if p.grad is not None]
                step_start = tracker.mark()
                optimizer.step()
                state = [
                    tracker.watch(t)
                    for per_param in optimizer.state.values()
                    for t in per_param.values()
                    if isinstance(t, torch.Tensor)
                ]
                if gpu and device == "cpu":
                    # Standing in for a GPU: the CPU's AdamW step counters are not counted.
                    # (The trainer's fused AdamW keeps them on the GPU, 512 bytes each there:
                    # left uncounted, as before, so that the CPU's estimate is unchanged.)
                    tracker.elsewhere.update(
                        tracker.watch(step)
                        for per_param in optimizer.state.values()
                        if isinstance(step := per_param.get("step"), torch.Tensor)
                        and step.dim() == 0
                    )
                optimizer.zero_grad(set_to_none=True)
            end = tracker.mark()
            del inputs, targets, optimizer
        kinds = {
            **dict.fromkeys(weights, "weights"),
            **dict.fromkeys(gradients, "gradients"),
            **dict.fromkeys(state, "optimizer"),
        }
        replay = tracker.replay(kinds, start=start, step_start=step_start, end=end)
        return StepMemory(
            plan=plan,
            micro_batch_samples=samples,
            precision=target.precision,
            weights_bytes=tracker.total(weights),
            gradients_bytes=tracker.total(gradients),
            optimizer_bytes=tracker.total(state),
            activations_bytes=replay.activations,
            optimizer_step_bytes=replay.step_temporaries,
            peak_bytes=replay.peak,
            data_bytes=self.data_bytes,
            measured_on=f"fake {device}" if fake else "cpu",
        )


def _why_no_cuda() -> str:
    """Why `torch.cuda.is_available()` is False here, in words."""
    if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
        return "this torch has no CUDA (a CPU-only build)"
    return "no GPU is visible to this process (a CUDA build of torch, but no usable device)"


def fake_model(model: torch.nn.Module, fake_mode: Any, device: str) -> None:
    """Swap the model's parameters and buffers for fake tensors on `device`, in place.

    Each is converted once (tied weights stay tied) into a new tensor: moving a fake module
    with ``.to()`` would set ``.data`` across devices, which fake tensors do not follow.
    """
    converted: dict[int, torch.Tensor] = {}

    def fake(tensor: torch.Tensor) -> torch.Tensor:
        if id(tensor) not in converted:
            result = fake_mode.from_tensor(tensor)  # a Parameter stays one
            if device != "cpu":
                with fake_mode:
                    moved = result.detach().to(device)
                result = (
                    torch.nn.Parameter(moved, requires_grad=tensor.requires_grad)
                    if isinstance(tensor, torch.nn.Parameter)
                    else moved
                )
            converted[id(tensor)] = result
        return converted[id(tensor)]

    for module in model.modules():
        for slots in (module._parameters, module._buffers):
            for name, tensor in slots.items():
                if tensor is not None:
                    slots[name] = fake(tensor)


def _largest_step(dataset: Dataset[Any], batch_size: int) -> int:
    """Samples in the largest optimizer step (`trainer.data.TrainData` spreads an epoch's
    leftover samples one each over its first steps)."""
    size = len(dataset)  # type: ignore[arg-type]
    return math.ceil(size / max(1, size // batch_size))


def _micro_batch(dataset: Dataset[Any], samples: int) -> Any:
    """(inputs, targets) of `samples` samples, as the trainer would feed them (copies)."""
    if isinstance(dataset, TensorDataset) and len(dataset.tensors) == 2:
        return tuple(t[:samples].clone() for t in dataset.tensors)
    items = [dataset[i] for i in range(min(samples, len(dataset)))]  # type: ignore[arg-type]
    inputs, targets = default_collate(items)
    return inputs, targets


def _data_bytes(task: Task, target: MemoryTarget) -> int:
    """Bytes of training data the trainer keeps on the device (`trainer.data.preload`)."""

    def tensor_bytes(dataset: Dataset[Any]) -> int | None:
        if isinstance(dataset, TensorDataset) and len(dataset.tensors) == 2:
            return sum(t.nbytes for t in dataset.tensors)
        return None

    def preloaded(size: int | None) -> bool:
        if size is None:
            return False
        if target.device_type != "cuda" or target.free_bytes is None:
            return True
        return 2 * size <= PRELOAD_FRACTION_OF_FREE_GPU_MEMORY * target.free_bytes

    train, val = tensor_bytes(task.train_set), tensor_bytes(task.val_set)
    total = 0
    if preloaded(train):
        assert train is not None
        total += 2 * train  # the data, and the epoch's shuffled copy
    if preloaded(val):
        assert val is not None
        total += val
    return total
