"""Training memory before a run: what one step of one configuration needs, measured.

Adam keeps 16 bytes per parameter before the first activation: fp32 weights (4), fp32
gradients (4) and two fp32 moments (8). Mixed precision as accelerate does it (torch's
autocast around the forward) does not change that: the weights stay fp32 and are the master
copy; autocast casts them to bf16/fp16 during each forward, and those transient half copies
(2 bytes per cast parameter, saved for the backward) count with the activations. What autocast
halves is the activations of the ops it casts (matmuls, convolutions); the rest (norms,
softmax, losses) stays fp32, and accelerate casts the model's outputs back to fp32. So the
activations are not guessed here from a formula: they are measured.

The dry run (`fit_memory`): the task is built as the trainer builds it (on the CPU: that needs
the host memory of its weights), then its model and one micro-batch become fake tensors
(torch's FakeTensorMode: shapes, dtypes and devices, no data) and the trainer's step runs on
them: the forward under the trial's autocast with the outputs cast back to fp32 (accelerate's
``prepare_model``), the loss divided by the accumulation (``accelerator.backward``), the
backward, the optimizer step - twice, and the second is measured, with the optimizer state
already there and, with accumulation, the gradients of one micro-batch alive during the next.
A dispatch mode (`_StorageTracker`) sees every tensor storage torch creates, and a weak
reference tells when it is freed; replayed in order, they give the peak and its parts. Nothing
is computed and nothing is allocated. A task whose code cannot run on fake tensors (a branch on
a tensor's value, an op without a fake kernel) is measured the same way on real tensors on the
CPU, where allowed.

What the bytes leave out: the CUDA context (~0.3-0.5 GB per process), cuBLAS/cuDNN workspaces,
the caching allocator's fragmentation, and tensors a task keeps outside torch's operators. That
is what `HEADROOM` is for: a step fits if it needs at most 90% of the device.

Example::

    from trainer import TrainConfig, resolve_task
    from trainer.memory import MemoryTarget, fit_memory
    from trainer.sizes import parse_size

    target = MemoryTarget.for_gpu(parse_size("24GiB"), "auto")
    fit = fit_memory(resolve_task("digits"), {"width": 64, "batch_size": 128},
                     TrainConfig(epochs=1), target)
    fit.verdict, fit.configured.peak_bytes    # ('fits as configured', 10714624)
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch
from accelerate.utils import convert_to_fp32
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map
from torch.utils.data import Dataset, TensorDataset, default_collate

from trainer.config import DEFAULT_BATCH_SIZE, DEFAULT_LR, DEFAULT_WEIGHT_DECAY, TrainConfig
from trainer.data import PRELOAD_FRACTION_OF_FREE_GPU_MEMORY
from trainer.device import choose_precision, device_name, resolve_device
from trainer.faults import first_line
from trainer.grad_checkpointing import can_checkpoint, set_grad_checkpointing
from trainer.loop import train
from trainer.sizes import HEADROOM, format_size
from trainer.task import Task, TaskFactory

__all__ = [
    "MemoryCheckError",
    "MemoryFit",
    "MemoryPlan",
    "MemoryTarget",
    "StepMemory",
    "StepTiming",
    "adaptation_plans",
    "check_memory",
    "fit_memory",
    "time_steps",
]

CUDA_BLOCK = 512
"""The CUDA caching allocator rounds every tensor up to a multiple of 512 bytes (what
``torch.cuda.max_memory_allocated`` counts); a dry run for a GPU rounds the same way."""

_AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}


class MemoryCheckError(RuntimeError):
    """The dry run could not run the task's step; the message is one line."""


# -- what is measured -------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class MemoryPlan:
    """How a step is fitted into memory: the trainer's knobs, with the effective batch fixed."""

    batch_size: int
    """Samples per optimizer step (the effective batch)."""
    grad_accum_steps: int
    """Micro-batches per optimizer step."""
    grad_checkpointing: bool

    @property
    def micro_batch(self) -> int:
        return math.ceil(self.batch_size / self.grad_accum_steps)

    def describe(self) -> str:
        """E.g. "micro-batch 16 x 4, gradient checkpointing"."""
        text = f"micro-batch {self.micro_batch} x {self.grad_accum_steps}"
        return text + (", gradient checkpointing" if self.grad_checkpointing else "")


@dataclass(frozen=True, kw_only=True)
class StepMemory:
    """The bytes one training step of one configuration keeps, measured by a dry run."""

    plan: MemoryPlan
    micro_batch_samples: int
    """Samples in the largest micro-batch the trainer forms (the leftover samples of an epoch
    are spread over its steps, so a step can hold a few more than batch_size)."""
    precision: str
    """bf16 | fp16 (autocast, fp32 weights) | fp32."""
    weights_bytes: int
    """Parameters and buffers, as the model holds them (fp32 under autocast)."""
    gradients_bytes: int
    """The parameters' gradients (their dtype: fp32 under autocast)."""
    optimizer_bytes: int
    """Optimizer state: AdamW's two moments and step counters, or SGD's momentum."""
    activations_bytes: int
    """Peak of the forward and backward's own tensors, beyond weights, gradients and optimizer
    state: what the backward needs (saved activations, autocast's half copies of the weights),
    temporaries, and the micro-batch itself."""
    optimizer_step_bytes: int
    """Peak of the optimizer step's temporaries (e.g. the foreach AdamW of a GPU makes whole
    copies of the moments' size)."""
    peak_bytes: int
    """The measured peak of all of the above during the step: less than their sum, since
    activations are freed as the gradients appear (with accumulation, the gradients of one
    micro-batch stay alive through the next)."""
    data_bytes: int
    """Training data the trainer keeps on the device: a TensorDataset is preloaded there, with a
    shuffled copy per epoch (on a GPU, when it takes at most a quarter of the memory)."""
    measured_on: str
    """"fake cpu" | "fake cuda" (fake tensors, no compute) | "cpu" (real tensors)."""

    @property
    def total_bytes(self) -> int:
        """What must fit: the step's peak plus the data kept on the device."""
        return self.peak_bytes + self.data_bytes

    def breakdown(self) -> str:
        """One line: "weights 188 KiB, gradients 188 KiB, optimizer 376 KiB, ..."."""
        parts = [
            f"weights {format_size(self.weights_bytes)}",
            f"gradients {format_size(self.gradients_bytes)}",
            f"optimizer state {format_size(self.optimizer_bytes)}",
            f"activations {format_size(self.activations_bytes)}",
        ]
        if self.data_bytes:
            parts.append(f"data {format_size(self.data_bytes)}")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch_size": self.plan.batch_size,
            "micro_batch": self.plan.micro_batch,
            "grad_accum_steps": self.plan.grad_accum_steps,
            "grad_checkpointing": self.plan.grad_checkpointing,
            "micro_batch_samples": self.micro_batch_samples,
            "precision": self.precision,
            "weights_bytes": self.weights_bytes,
            "gradients_bytes": self.gradients_bytes,
            "optimizer_bytes": self.optimizer_bytes,
            "activations_bytes": self.activations_bytes,
            "optimizer_step_bytes": self.optimizer_step_bytes,
            "peak_bytes": self.peak_bytes,
            "data_bytes": self.data_bytes,
            "total_bytes": self.total_bytes,
            "measured_on": self.measured_on,
        }


@dataclass(frozen=True, kw_only=True)
class MemoryTarget:
    """The device a trial would train on: its kind, the precision it gets, its memory."""

    device_type: str
    """cpu | cuda."""
    device_name: str
    """"cpu", a GPU's name, or "a GPU" (one this machine does not have)."""
    precision: str
    """bf16 | fp16 | fp32: what the trainer would use there (`choose_precision`)."""
    precision_reason: str
    limit_bytes: int | None
    """The memory a step may use; None on a CPU without a given limit."""
    limit_source: str
    """Where the limit comes from, in words."""
    free_bytes: int | None = None
    """A GPU's free memory, which the trainer's data preload is judged against (`trainer.data.
    preload`): the real GPU's, even when a smaller limit is given; the limit, for a GPU this
    machine does not have."""

    @property
    def usable_bytes(self) -> int | None:
        """The limit less `HEADROOM`."""
        return None if self.limit_bytes is None else int(self.limit_bytes * (1 - HEADROOM))

    @classmethod
    def for_device(
        cls, device: str | None, requested_precision: str, limit_bytes: int | None = None
    ) -> MemoryTarget:
        """A device of this machine ("cpu", "cuda:0"; None: CUDA if available, else the CPU).

        The limit is `limit_bytes` if given, else a GPU's free memory now (other processes and
        this one's CUDA context already taken), else none (a CPU has no fixed limit: its step
        is measured, not judged). Raises ValueError (one line) for a device it does not have.
        """
        where = resolve_device(device)
        precision, reason = choose_precision(requested_precision, where)
        name = device_name(where)
        free, total = torch.cuda.mem_get_info(where) if where.type == "cuda" else (None, None)
        if limit_bytes is not None:
            source = f"{format_size(limit_bytes)} given"
        elif free is not None and total is not None:
            limit_bytes = free
            source = f"{format_size(free)} free of {format_size(total)} on {name} ({where})"
        else:
            source = "the CPU has no fixed memory limit"
        return cls(
            device_type=where.type,
            device_name=name,
            precision=precision,
            precision_reason=reason,
            limit_bytes=limit_bytes,
            limit_source=source,
            free_bytes=free,
        )

    @classmethod
    def for_gpu(cls, limit_bytes: int, requested_precision: str) -> MemoryTarget:
        """A GPU of `limit_bytes` that this machine need not have (planning a launch).

        Precision as the trainer would choose on a recent GPU: auto is bf16 (fp16 on GPUs
        without bf16 keeps the same bytes).
        """
        precision = "bf16" if requested_precision == "auto" else requested_precision
        reason = (
            "auto on a GPU: bf16; fp16 on a GPU without bf16 keeps the same bytes"
            if requested_precision == "auto"
            else f"{requested_precision} requested"
        )
        return cls(
            device_type="cuda",
            device_name="a GPU",
            precision=precision,
            precision_reason=reason,
            limit_bytes=limit_bytes,
            limit_source=f"{format_size(limit_bytes)} given",
            free_bytes=limit_bytes,
        )


@dataclass(kw_only=True)
class MemoryFit:
    """Whether a configuration fits its target, and how: the trainer's plans, measured in the
    order it adapts after an out-of-memory error, up to the first that fits."""

    target: MemoryTarget
    configured: StepMemory
    """The plan as configured."""
    tried: list[StepMemory]
    """Every plan measured, in order (the configured one first)."""
    can_checkpoint: bool
    """Whether the model has a gradient checkpointing switch."""
    notes: list[str] = field(default_factory=list)
    """What the measurement had to do differently, in words (e.g. real tensors)."""

    @property
    def fits(self) -> bool | None:
        """None without a limit."""
        if self.target.usable_bytes is None:
            return None
        return self.fitted is not None

    @property
    def fitted(self) -> StepMemory | None:
        """The first plan that fits, or None (also without a limit)."""
        usable = self.target.usable_bytes
        if usable is None:
            return None
        return next((m for m in self.tried if m.total_bytes <= usable), None)

    @property
    def verdict(self) -> str:
        """A few words: "fits as configured", "fits with micro-batch 16 x 4", "does not fit"."""
        fits = self.fits
        if fits is None:
            return "no limit to check against"
        if not fits:
            return "does not fit"
        fitted = self.fitted
        assert fitted is not None
        if fitted.plan == self.configured.plan:
            return "fits as configured"
        if fitted.plan.grad_accum_steps == self.configured.plan.grad_accum_steps:
            return "fits with gradient checkpointing"
        return f"fits with {fitted.plan.describe()}"

    @property
    def reason(self) -> str:
        """One line: why it does not fit (or the verdict when it does)."""
        if self.fits is not False:
            return self.verdict
        last = self.tried[-1]
        usable, limit = self.target.usable_bytes, self.target.limit_bytes
        return (
            f"does not fit in {format_size(usable)} ({format_size(limit)} less "
            f"{HEADROOM:.0%} headroom): even {last.plan.describe()} needs "
            f"{format_size(last.total_bytes)} at its peak ({last.breakdown()}; "
            f"{last.precision})"
        )


# -- the dry run ------------------------------------------------------------------------------


def adaptation_plans(
    batch_size: int, grad_accum_steps: int, grad_checkpointing: bool, can_checkpoint: bool
) -> Iterator[MemoryPlan]:
    """The plans in the order the trainer tries them after out-of-memory errors: as configured,
    then gradient checkpointing (if the model has the switch), then half the micro-batch and
    twice the accumulation, down to micro-batches of 1."""
    accum = min(grad_accum_steps, batch_size)
    checkpointing = grad_checkpointing and can_checkpoint
    yield MemoryPlan(
        batch_size=batch_size, grad_accum_steps=accum, grad_checkpointing=checkpointing
    )
    if can_checkpoint and not checkpointing:
        checkpointing = True
        yield MemoryPlan(batch_size=batch_size, grad_accum_steps=accum, grad_checkpointing=True)
    while math.ceil(batch_size / accum) > 1:
        accum = min(batch_size, 2 * accum)
        yield MemoryPlan(
            batch_size=batch_size, grad_accum_steps=accum, grad_checkpointing=checkpointing
        )


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
        # autocast policy and the optimizer it gets there (foreach) are then the real ones.
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
                    _fake_model(model, self.fake_mode, self.fake_device)
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
                    _fake_model(model, self.fake_mode, "cpu")
            device = self.fake_device
            batch = tree_map(
                lambda t: self.fake_mode.from_tensor(t) if isinstance(t, torch.Tensor) else t,
                batch,
            )
        set_grad_checkpointing(model, plan.grad_checkpointing)
        model.train()
        model.zero_grad(set_to_none=True)
        gpu = target.device_type == "cuda"
        tracker = _StorageTracker(round_to=CUDA_BLOCK if gpu else 1, device_type=device)
        parameters = list(model.parameters())
        weights = [tracker.watch(t) for t in (*parameters, *model.buffers())]
        autocast = _AUTOCAST_DTYPES[target.precision]
        loss_fn = self.task.loss_fn
        micro_batches = min(plan.grad_accum_steps, 2)  # the second has the first's gradients
        with self.fake_mode if fake else contextlib.nullcontext(), tracker:
            inputs, targets = tree_map(
                lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, batch
            )
            for t in tree_leaves((inputs, targets)):
                if isinstance(t, torch.Tensor):
                    tracker.watch(t)
            optimizer = _optimizer(self.config.optimizer, parameters, self.params, device)
            for iteration in range(2):
                if iteration == 1:
                    start = tracker.mark()
                for _ in range(micro_batches):
                    if autocast is None:
                        outputs = model(inputs)
                    else:
                        with torch.autocast(device, dtype=autocast):
                            outputs = model(inputs)
                        outputs = convert_to_fp32(outputs)
                    loss = loss_fn(outputs, targets)
                    del outputs
                    (loss / plan.grad_accum_steps).backward()
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
                    # Standing in for a GPU: there AdamW keeps its step counters on the CPU
                    # (unless fused or capturable), as the fake CUDA run sees by itself.
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


@dataclass
class _Replay:
    peak: int = 0
    activations: int = 0
    step_temporaries: int = 0


class _StorageTracker(TorchDispatchMode):
    """Every tensor storage torch creates while the mode is on, and when each is freed.

    An allocation is known by a serial number: its storage's address can be reused once it is
    freed. Storages made before the mode (the weights) are registered with `watch`. With a
    `device_type`, storages on other devices (AdamW's step counters stay on the CPU when it
    trains on a GPU) are known but not counted (`elsewhere`).
    """

    def __init__(self, round_to: int = 1, device_type: str | None = None) -> None:
        super().__init__()
        self.round_to = round_to
        self.device_type = device_type
        self.elsewhere: set[int] = set()  # serials of storages on another device
        self.live: dict[int, tuple[int, int]] = {}  # storage address -> (serial, bytes)
        self.sizes: dict[int, int] = {}  # serial -> bytes
        self.events: list[tuple[int, int]] = []  # (serial, +bytes or -bytes), in order
        self.current = 0
        self.peak = 0
        self._refs: dict[int, weakref.ref[Any]] = {}

    def watch(self, tensor: torch.Tensor) -> int:
        """Register the tensor's storage (once); returns its allocation's serial number."""
        storage = tensor.untyped_storage()
        address = storage._cdata
        if address in self.live:
            return self.live[address][0]
        size = storage.nbytes()
        size = -(-size // self.round_to) * self.round_to
        serial = len(self.sizes)
        self.live[address] = (serial, size)
        self.sizes[serial] = size
        self.events.append((serial, size))
        if self.device_type is not None and tensor.device.type != self.device_type:
            self.elsewhere.add(serial)
        else:
            self.current += size
            self.peak = max(self.peak, self.current)
        # Storages keep their Python object alive as long as they live (torch preserves it),
        # so this weak reference dies with the storage itself.
        self._refs[serial] = weakref.ref(storage, lambda _ref: self._freed(address, serial))
        return serial

    def _freed(self, address: int, serial: int) -> None:
        self._refs.pop(serial, None)
        if self.live.get(address, (None,))[0] == serial:
            del self.live[address]
            self.events.append((serial, -self.sizes[serial]))
            if serial not in self.elsewhere:
                self.current -= self.sizes[serial]

    def mark(self) -> int:
        return len(self.events)

    def total(self, serials: list[int]) -> int:
        return sum(self.sizes[s] for s in set(serials) - self.elsewhere)

    def replay(self, kinds: dict[int, str], *, start: int, step_start: int, end: int) -> _Replay:
        """Peaks within events [start, end): of everything, and of what is not weights,
        gradients or optimizer state, before `step_start` (activations) and after (the
        optimizer step's temporaries)."""
        out = _Replay()
        total = other = 0
        for index, (serial, delta) in enumerate(self.events[:end]):
            if serial in self.elsewhere:
                continue
            total += delta
            if serial not in kinds:
                other += delta
            if index < start - 1:
                continue
            out.peak = max(out.peak, total)
            if index < step_start:
                out.activations = max(out.activations, other)
            else:
                out.step_temporaries = max(out.step_temporaries, other)
        return out

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for value in tree_leaves(out):
            if isinstance(value, torch.Tensor):
                self.watch(value)
        return out


def _why_no_cuda() -> str:
    """Why `torch.cuda.is_available()` is False here, in words."""
    if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
        return "this torch has no CUDA (a CPU-only build)"
    return "no GPU is visible to this process (a CUDA build of torch, but no usable device)"


def _fake_model(model: torch.nn.Module, fake_mode: Any, device: str) -> None:
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


def _optimizer(
    name: str, parameters: list[torch.nn.Parameter], params: dict[str, Any], device: str
) -> torch.optim.Optimizer:
    """The trainer's optimizer, with the implementation torch picks on the device (foreach on
    a GPU, whose temporaries are whole copies; the per-parameter loop on a CPU)."""
    foreach = device == "cuda"
    lr = float(params.get("lr", DEFAULT_LR))
    weight_decay = float(params.get("weight_decay", DEFAULT_WEIGHT_DECAY))
    if name == "sgd":
        # Any nonzero momentum keeps one buffer per parameter, as the trainer's SGD does.
        return torch.optim.SGD(
            parameters,
            lr=lr,
            momentum=0.9,
            nesterov=True,
            weight_decay=weight_decay,
            foreach=foreach,
        )
    return torch.optim.AdamW(parameters, lr=lr, weight_decay=weight_decay, foreach=foreach)


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


# -- real steps: the efficiency study ---------------------------------------------------------


@dataclass(kw_only=True)
class StepTiming:
    """A few real training steps of one configuration: time per step and peak memory."""

    status: str
    """The trainer's status: "preempted" is the normal end (stopped after the steps)."""
    reason: str | None
    precision: str
    grad_accum_steps: int
    grad_checkpointing: bool
    adapted: list[str]
    """The trainer's adaptations (e.g. after an out-of-memory error): the row is then not the
    configuration it was asked for."""
    step_seconds: list[float]
    """Seconds of each measured optimizer step (after the warm-up steps)."""
    steps_include_evaluation: bool
    """True when an epoch was too short to time steps within one, so an end-of-epoch
    evaluation falls inside some of them."""
    peak_memory_bytes: int
    peak_memory_kind: str
    """"cuda_max_allocated" (torch's CUDA allocator) or "process_peak_rss" (the whole process,
    on a CPU)."""
    tensor_peak_bytes: int | None
    """Peak bytes of torch's tensors over a second, two-step run, counted by a dispatch mode
    (on a CPU, where there are no allocator statistics); None on a GPU."""
    device_name: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def time_steps(
    task_factory: TaskFactory,
    params: dict[str, Any],
    config: TrainConfig,
    *,
    device: str | None,
    steps: int,
    warmup: int = 2,
    count_tensors: bool | None = None,
) -> StepTiming:
    """Train `warmup` + `steps` optimizer steps with `trainer.train` and time the last `steps`.

    On a GPU each step ends with a synchronize, so its time is the GPU's, and the peak is
    ``torch.cuda.max_memory_allocated``. On a CPU the peak the trainer reports is the process's
    resident set (run this in a fresh process to make it this configuration's); with
    `count_tensors` (the default on a CPU) a second run of two steps counts torch's tensors.
    """
    if warmup < 1 or steps < 1:
        raise ValueError(f"warmup and steps must be >= 1, got {warmup} and {steps}")
    where = resolve_device(device)
    marks: list[tuple[int, float]] = []  # (epoch, time) at the end of each optimizer step
    stop = threading.Event()

    def progress(epoch: int, step: int, steps_per_epoch: int, loss: float) -> None:
        if where.type == "cuda":
            torch.cuda.synchronize(where)
        marks.append((epoch, time.perf_counter()))
        if len(marks) >= warmup + steps:
            stop.set()

    # Enough epochs that the stop comes first, and no checkpoint on the way.
    run_config = replace(config, epochs=warmup + steps + 1, checkpoint_every_s=math.inf)
    result = train(
        task_factory, params, run_config, device=str(where), stop=stop, progress=progress
    )
    # A step's time runs from the end of the one before: the first measured step follows the
    # last warm-up step. (seconds, whether both ends are in the same epoch)
    intervals = [
        (later[1] - earlier[1], later[0] == earlier[0])
        for earlier, later in zip(marks[warmup - 1 : -1], marks[warmup:], strict=True)
    ]
    within = [seconds for seconds, same_epoch in intervals if same_epoch]
    tensor_peak = None
    if count_tensors if count_tensors is not None else where.type == "cpu":
        tensor_peak = _tensor_peak(task_factory, params, run_config, where)
    return StepTiming(
        status=result.status,
        reason=None if result.status == "preempted" else result.reason,
        precision=result.precision,
        grad_accum_steps=result.grad_accum_steps,
        grad_checkpointing=result.grad_checkpointing,
        adapted=list(result.adapted),
        step_seconds=within or [seconds for seconds, _ in intervals],
        steps_include_evaluation=not within and bool(intervals),
        peak_memory_bytes=result.peak_memory_bytes,
        peak_memory_kind=result.peak_memory_kind,
        tensor_peak_bytes=tensor_peak,
        device_name=result.device_name,
    )


def _tensor_peak(
    task_factory: TaskFactory, params: dict[str, Any], config: TrainConfig, where: torch.device
) -> int:
    """Peak bytes of torch's tensors over two real steps (build, data, model, state, step)."""
    stop = threading.Event()
    done = [0]

    def progress(epoch: int, step: int, steps_per_epoch: int, loss: float) -> None:
        done[0] += 1
        if done[0] >= 2:
            stop.set()

    tracker = _StorageTracker()
    with tracker:
        train(task_factory, params, config, device=str(where), stop=stop, progress=progress)
    return tracker.peak
