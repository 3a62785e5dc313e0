"""`train`: one configuration of one task, trained for `config.epochs` epochs, restartable.

`_fit` is the training loop, one function read top to bottom: build the task, resume from the
checkpoint if it is this run's, then epochs of optimizer steps, each ending with validate ->
checkpoint -> report. Accelerate does mixed precision and gradient accumulation. `train` wraps
it with what ends an attempt: an out-of-memory error in a training step (adapt, then resume),
a non-finite loss (diverged), a CUDA error (device_error), any other error (failed), SIGTERM
or `stop` (checkpoint, preempted: asked before every step and every validation batch; stopped
in validation, the epoch is checkpointed as trained and validated after the resume).

Example::

    from trainer import DirectoryCheckpointStore, TrainConfig, resolve_task, train

    result = train(resolve_task("digits"), {"lr": 3e-3, "width": 16}, TrainConfig(epochs=3),
                   checkpoints=DirectoryCheckpointStore("checkpoints/trial-0"))
    print(result.status, result.metrics)   # run it again: it resumes, re-reports epoch 3, done

Caveat: accelerate keeps its state in process-wide singletons, which `train` resets (all but
the process's device set-up) when it starts: run one `train` at a time in a process (a worker
runs its trials one after another).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import math
import random
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict
from typing import Any

import accelerate.optimizer
import numpy as np
import torch
from accelerate import Accelerator

from trainer.accelerate_env import accelerator_for_trial
from trainer.checkpoint import CheckpointError, CheckpointStore, run_fingerprint
from trainer.config import DEFAULT_BATCH_SIZE, DEFAULT_LR, DEFAULT_WEIGHT_DECAY, TrainConfig
from trainer.data import TrainData, eval_batches, preload
from trainer.device import (
    choose_precision,
    device_name,
    peak_memory,
    reset_peak_memory,
    resolve_device,
    world_size,
)
from trainer.faults import classify, first_line
from trainer.gpu_settings import apply_gpu_settings
from trainer.grad_checkpointing import set_grad_checkpointing
from trainer.result import TrainResult
from trainer.rng import rng_state, set_rng_state
from trainer.sharding import load_weights, shard_model, weights_state
from trainer.step import MemoryAdaptation, make_optimizer, micro_step
from trainer.task import Task, TaskFactory
from trainer.train_state import CHECKPOINT_FORMAT, TrainState

__all__ = ["ProgressFn", "train"]

log = logging.getLogger("trainer")

WARMUP_FRACTION = 0.05
"""Share of all optimizer steps over which the learning rate rises linearly from ~0 to its peak;
a cosine decay to 0 over the rest follows."""
LOSS_CHECK_EVERY_ON_GPU = 16
"""Micro-batches between two reads of the loss on a GPU. Reading a loss makes the CPU wait for
the GPU; doing it every step would drain the kernel queue each time. A diverged run on a GPU so
stops within this many micro-batches; on the CPU, which runs synchronously, it stops at once."""
TRAIN_STEP = "in a training step"
"""`MemoryAdaptation.phase` during training steps: the only place where out of memory is adapted
to."""

ProgressFn = Callable[[int, int, int, float], None]
"""Called after each optimizer step with (epoch, step, steps_per_epoch, loss), epoch and step
1-based; loss is the last micro-batch loss read back (NaN before the first)."""


def train(
    task_factory: TaskFactory,
    params: dict[str, Any],
    config: TrainConfig,
    *,
    report: Callable[[int, float], bool] | None = None,
    checkpoints: CheckpointStore | None = None,
    device: str | None = None,
    stop: threading.Event | None = None,
    progress: ProgressFn | None = None,
) -> TrainResult:
    """Train one configuration of one task; never raises for the task's failures.

    Args:
        task_factory: builds the model and data from `params` (called again on each attempt).
        params: the trial's hyperparameters. The trainer reads ``lr``, ``weight_decay`` and
            ``batch_size`` (the effective batch) when present; all go to the factory.
        config: epochs, precision, accumulation, checkpointing, optimizer and seed.
        report: called after each epoch's checkpoint with (epoch, metric), epoch 1-based;
            returning True stops the run with status "pruned". After a resume from the end of
            epoch k it is first called again with (k, metric of k): treat repeats as idempotent.
        checkpoints: where this run's latest checkpoint lives; resumed from if it holds one of
            this run (same task, params, config and data), else overwritten.
        device: "cpu", "cuda" or "cuda:N"; None means CUDA if available, else the CPU.
        stop: set it to preempt the run: it checkpoints before its next step and returns
            status "preempted". SIGTERM does the same while `train` runs in the main thread.
        progress: see `ProgressFn` (the command line draws its progress bar with it).

    Raises only KeyboardInterrupt (and whatever a chained SIGTERM handler raises); everything
    else is a status in the result: completed, pruned, diverged, failed, preempted, or
    device_error (a CUDA error: train nothing more in this process).

    Out of memory in a training step is adapted to (gradient checkpointing, then half the
    micro-batch, same effective batch) and the run resumes; out of memory anywhere else
    (building the task, preloading the data, moving the model, validation) fails the run
    with where it happened. Peak memory is counted per attempt: the result has the last one's.
    """
    started = time.perf_counter()
    result = TrainResult(
        status="failed", torch_version=torch.__version__, cuda_version=torch.version.cuda
    )
    try:
        where = resolve_device(device)
        batch_size = int(params.get("batch_size", DEFAULT_BATCH_SIZE))
    except (TypeError, ValueError) as exc:
        result.reason = f"{type(exc).__name__}: {first_line(exc)}"
        result.wall_seconds = time.perf_counter() - started
        return result
    result.device_name = device_name(where)
    result.precision, result.precision_reason = choose_precision(config.precision, where)
    result.device_settings = apply_gpu_settings(where, result.precision, config.deterministic)
    log.info(
        "precision %s (%s); %s", result.precision, result.precision_reason, result.device_settings
    )
    fit = MemoryAdaptation(
        grad_accum_steps=min(config.grad_accum_steps, batch_size),
        grad_checkpointing=config.grad_checkpointing,
    )
    if config.grad_accum_steps > batch_size:
        fit.note(
            f"grad_accum_steps {config.grad_accum_steps} is more than batch_size "
            f"{batch_size}: {batch_size} micro-batches of 1"
        )
    with _sigterm_flag() as sigterm:
        stops = [event for event in (stop, sigterm) if event is not None]
        while True:
            reset_peak_memory(where)  # per attempt: the result reports the last attempt's peak
            out_of_memory = None
            try:
                result.status = _fit(
                    task_factory,
                    params,
                    config,
                    fit,
                    result,
                    device=where,
                    report=report,
                    checkpoints=checkpoints,
                    stops=stops,
                    progress=progress,
                )
            except _Diverged as exc:
                result.status, result.reason = "diverged", str(exc)
                log.warning("diverged: %s", exc)
            except Exception as exc:  # the task's code (or ours): the trial fails, not the worker
                fault = classify(exc)
                if fault == "out_of_memory":
                    out_of_memory = first_line(exc)
                else:
                    # A CUDA error leaves the process's context unusable: "device_error" tells
                    # the caller to stop training in this process (see trainer.faults).
                    result.status = "device_error" if fault == "device_error" else "failed"
                    result.reason = f"{type(exc).__name__}: {first_line(exc)}"
                    result.traceback = traceback.format_exc()
                    log.error("%s: %s", result.status.replace("_", " "), result.reason)
            if out_of_memory is None:
                break
            # Here, out of the except block, the traceback and its frames (which hold the
            # model, the optimizer and the batch) are gone, so their memory can be released.
            _release_memory(where)
            if fit.phase != TRAIN_STEP:
                # A smaller micro-batch shrinks the training step only: out of memory anywhere
                # else (the data, the model, validation's outputs) would fail the same way.
                result.status = "failed"
                result.reason = (
                    f"out of memory {fit.phase} ({out_of_memory}); the micro-batch is not what "
                    "does not fit, so it was not reduced"
                )
                log.error("failed: %s", result.reason)
                break
            # The ranks of a data-parallel run cannot retry alone: that attempt ends there.
            alone = world_size() == 1
            decision = fit.after_out_of_memory(out_of_memory, batch_size) if alone else None
            if decision is None:
                result.status = "failed"
                result.reason = (
                    f"out of memory at micro-batch 1 (batch_size {batch_size}, grad_accum_steps "
                    f"{fit.grad_accum_steps}, gradient checkpointing "
                    f"{'on' if fit.grad_checkpointing else 'off'}): {out_of_memory}"
                )
                log.error("failed: %s", result.reason)
                break
            then = "resuming from the last checkpoint" if checkpoints is not None else "restarting"
            log.warning("%s; %s", decision, then)
    result.adapted = list(fit.adapted)
    result.grad_accum_steps = fit.grad_accum_steps
    result.grad_checkpointing = fit.grad_checkpointing
    if result.status != "device_error":  # no CUDA call can succeed in this process any more
        result.peak_memory_bytes, result.peak_memory_kind = peak_memory(where)
        if where.type == "cuda":
            _release_memory(where)  # for the next trial in this process
    result.wall_seconds = time.perf_counter() - started
    return result


def _fit(
    task_factory: TaskFactory,
    params: dict[str, Any],
    config: TrainConfig,
    fit: MemoryAdaptation,
    result: TrainResult,
    *,
    device: torch.device,
    report: Callable[[int, float], bool] | None,
    checkpoints: CheckpointStore | None,
    stops: list[threading.Event],
    progress: ProgressFn | None,
) -> str:
    """One attempt at the run, from its checkpoint if it has one; returns the final status."""
    # The seed fixes the initial weights, dropout and (with the epoch) the data order.
    _seed_everything(config.seed)
    fit.phase = "while building the task"
    task: Task = task_factory(dict(params))
    lr = float(params.get("lr", DEFAULT_LR))
    weight_decay = float(params.get("weight_decay", DEFAULT_WEIGHT_DECAY))
    batch_size = int(params.get("batch_size", DEFAULT_BATCH_SIZE))
    fit.phase = "while preloading the data"
    data = TrainData(task.train_set, batch_size=batch_size, device=device, seed=config.seed)
    val_tensors = preload(task.val_set, device)
    result.data_fingerprint, result.steps_per_epoch = data.fingerprint, data.steps_per_epoch
    fingerprint = run_fingerprint(
        _task_id(task_factory), params, _config_identity(config), data.fingerprint
    )

    # Read the checkpoint before building the accelerator: it says how the run was fitted into
    # memory (accumulation, gradient checkpointing), and the resumed run must go on the same way.
    state = _load_checkpoint(checkpoints, fingerprint)
    saved = None if state is None else TrainState.from_state_dict(state["train_state"])
    if saved is not None:
        fit.adopt(saved)
    model = task.model
    fit.model_can_checkpoint = set_grad_checkpointing(model, fit.grad_checkpointing)
    if fit.grad_checkpointing and not fit.model_can_checkpoint:
        fit.note(
            f"gradient checkpointing requested, but {type(model).__name__} has no "
            "grad_checkpointing switch: trained without it"
        )
    micro_batches = fit.grad_accum_steps
    if data.size < micro_batches:
        raise ValueError(
            f"the training set has {data.size} samples, fewer than "
            f"grad_accum_steps = {micro_batches}"
        )
    accelerator = _fresh_accelerator(result.precision, micro_batches, device)
    fit.phase = "while moving the model to the device"
    # FSDP (trainer.sharding) moves each rank's shards to the device itself, before the
    # optimizer is built: it must hold the sharded parameters.
    sharded = config.sharding == "fsdp" and world_size() > 1
    if sharded:
        shard_model(model, result.precision, device)
    else:
        model.to(device)
    optimizer = make_optimizer(config.optimizer, model.parameters(), lr, weight_decay, device)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, _warmup_cosine(config.epochs * data.steps_per_epoch)
    )
    # The scheduler is stepped here, once per optimizer step whether or not fp16's loss scaler
    # skipped it: the schedule follows the data and ends at 0 (accelerate's wrapper would skip
    # it after an overflow, so the two drift apart).
    if sharded:  # FSDP wraps the model and does its precision; accelerate the rest
        optimizer = accelerator.prepare(optimizer)
    else:
        model, optimizer = accelerator.prepare(model, optimizer)
    skipped = _SkippedSteps(accelerator.scaler)
    eval_batch_size = math.ceil(batch_size / micro_batches)  # what fits for training fits here

    # Loop state: `epoch` epochs are done, `step` is the next step of epoch `epoch` (0-based).
    epoch, step, order = 0, 0, None
    metrics: list[float] = []
    train_losses: list[float] = []
    optimizer_steps = 0
    losses = _LossWatch(every=1 if device.type == "cpu" else LOSS_CHECK_EVERY_ON_GPU)
    if state is not None and saved is not None:
        fit.phase = "while resuming from the checkpoint"
        load_weights(accelerator.unwrap_model(model), optimizer.optimizer, state)
        state.pop("shards", None)  # a sharded checkpoint's unpacked files: no longer needed
        scheduler.load_state_dict(state["scheduler"])
        if accelerator.scaler is not None and state["scaler"] is not None:
            accelerator.scaler.load_state_dict(state["scaler"])
        if saved.precision != result.precision:  # e.g. auto: bf16 GPU, then an fp16 one
            switched = (
                f"resumed: precision {saved.precision} before, {result.precision} now "
                f"({result.precision_reason}): the run's numerics changed at the resume"
            )
            result.notes.append(switched)
            log.warning("%s", switched)
        epoch, step, optimizer_steps = saved.epoch, saved.step, saved.optimizer_steps
        skipped.total = saved.skipped_steps
        metrics, train_losses = saved.metrics, saved.train_losses
        losses.sum, losses.count = saved.loss_sum, saved.loss_count
        order = saved.order
        not_restored = None if saved.rng is None else set_rng_state(saved.rng, device)
        if not_restored is not None:
            result.notes.append(f"resumed: {not_restored}")
            log.warning("resumed: %s", not_restored)
        result.resumed_from = {"epoch": epoch, "step": step}
        log.info(
            "resumed from epoch %d step %d (%d optimizer steps done)", epoch, step, optimizer_steps
        )
    if accelerator.num_processes > 1:
        # Ranks start from one RNG state (the seed, or rank 0's checkpoint); each then draws its
        # own dropout masks. The weights stay one: DDP broadcasts rank 0's when it wraps them,
        # and FSDP shards weights every rank built alike from the seed (or the checkpoint).
        torch.manual_seed(int(torch.randint(2**62, (1,))) + accelerator.process_index)
    # The result shares these lists, so it holds the history however the run ends.
    result.metrics, result.train_losses = metrics, train_losses

    def stopped() -> bool:
        """SIGTERM or `stop`: asked before every step and every validation batch."""
        return any(event.is_set() for event in stops)

    def preempt(saved: bool, where: str) -> str:
        """The end of a stopped run, its checkpoint written (or not: `saved`) at `where`."""
        if not saved:
            result.reason = "preempted without a checkpoint: progress is lost"
        log.info("preempted %s", where)
        return "preempted"

    def save_checkpoint() -> bool:
        """Everything needed to go on exactly from here; False if the store failed."""
        nonlocal last_save
        if checkpoints is None:
            return False
        last_save = time.monotonic()
        phase, fit.phase = fit.phase, "while checkpointing"
        # Without DDP's "module."; FSDP's: this rank's shards (trainer.sharding).
        weights = weights_state(accelerator.unwrap_model(model), optimizer.optimizer)
        checkpoint = {
            "format": CHECKPOINT_FORMAT,
            "fingerprint": fingerprint,
            "scheduler": scheduler.state_dict(),
            "scaler": None if accelerator.scaler is None else accelerator.scaler.state_dict(),
            "train_state": TrainState(
                epoch=epoch,
                step=step,
                optimizer_steps=optimizer_steps,
                skipped_steps=skipped.read(),
                metrics=metrics,
                train_losses=train_losses,
                loss_sum=losses.sum,
                loss_count=losses.count,
                grad_accum_steps=fit.grad_accum_steps,
                grad_checkpointing=fit.grad_checkpointing,
                adapted=fit.adapted,
                precision=result.precision,
                order=order,
                rng=rng_state(device),
            ).state_dict(),
        }
        try:
            if sharded:
                result.checkpoint_bytes = checkpoints.save_sharded(checkpoint, weights)
            else:
                result.checkpoint_bytes = checkpoints.save(checkpoint | weights)
        except Exception as exc:  # e.g. a shared store briefly unreachable: costs one interval
            if classify(exc) is not None:
                raise  # the device's fault, not the store's
            log.warning(
                "checkpoint at epoch %d step %d not saved (%s: %s); training goes on",
                epoch,
                step,
                type(exc).__name__,
                first_line(exc),
            )
            return False
        finally:
            fit.phase = phase
        result.checkpoint_seconds = time.monotonic() - last_save
        return True

    try:
        # Resumed after epoch `epoch` (at its end or from inside the next one): the run may
        # have stopped before its caller recorded that epoch's report, so it is made again
        # (callers treat repeats as idempotent).
        if state is not None and metrics and report is not None and report(epoch, metrics[-1]):
            return "pruned"
        last_save = time.monotonic()
        while epoch < config.epochs:
            if order is None:
                order = data.order(epoch)
            model.train()
            fit.phase = TRAIN_STEP
            first_step = step
            # In a data-parallel run (trainer.distributed) each rank takes its share of a step.
            shard = (accelerator.process_index, accelerator.num_processes)
            for step, batch in data.steps(order, micro_batches, start=first_step, shard=shard):
                # Between two optimizer steps no gradient is half accumulated: the one place
                # where a checkpoint is complete and the run can stop.
                preempted = stopped()
                if preempted or (
                    checkpoints is not None
                    and time.monotonic() - last_save >= config.checkpoint_every_s
                ):
                    losses.check()  # never checkpoint a run that has already diverged
                    saved = save_checkpoint()
                    if preempted:
                        return preempt(saved, f"at epoch {epoch} step {step}")
                for inputs, targets, weight in batch:
                    with accelerator.accumulate(model):
                        loss = micro_step(
                            model, task.loss_fn, inputs, targets, accelerator.backward, weight
                        )
                        if accelerator.sync_gradients:
                            skipped.before_step()
                        optimizer.step()  # accelerate skips it until the last micro-batch
                        optimizer.zero_grad(set_to_none=True)
                    if accelerator.sync_gradients:
                        scheduler.step()
                        skipped.after_step()
                        optimizer_steps += 1
                    losses.add(loss, epoch, step)
                if progress is not None:
                    progress(epoch + 1, step + 1, data.steps_per_epoch, losses.last)
            losses.check()
            fit.phase = "in validation"
            batches = eval_batches(
                task.val_set, val_tensors, batch_size=eval_batch_size, device=device
            )
            metric = _evaluate(model, task, batches, stopped=stopped)
            if metric is None:
                # Stopped in validation (a spot instance's notice, a fence): this epoch's steps
                # are all done, so the checkpoint says so now rather than after a validation
                # that may outlast the notice; a resumed run validates this epoch first.
                step = data.steps_per_epoch
                return preempt(save_checkpoint(), f"in validation after epoch {epoch + 1}'s steps")
            metrics.append(metric)
            train_losses.append(losses.end_epoch())
            epoch, step, order = epoch + 1, 0, None
            fit.phase = "after validation"
            log.debug("epoch %d: metric %.4f, train loss %.4f", epoch, metric, train_losses[-1])
            save_checkpoint()
            if report is not None and report(epoch, metric):
                log.debug("pruned after epoch %d", epoch)
                return "pruned"
        return "completed"
    finally:
        result.optimizer_steps = optimizer_steps
        result.scheduler_steps = scheduler.last_epoch
        with contextlib.suppress(Exception):  # after a CUDA error the count is lost, not needed
            result.skipped_steps = skipped.read()


class _SkippedSteps:
    """fp16 optimizer steps that the loss scaler skipped after a gradient overflow.

    Counted on the device, with no host sync: the scaler lowers its scale exactly when it skips
    a step, so a step was skipped when the scale after it is below the scale before. Read (one
    sync) at checkpoints and at the end. Nothing to count without a scaler (bf16, fp32).
    """

    def __init__(self, scaler: torch.amp.GradScaler | None) -> None:
        self.scaler = scaler if scaler is not None and scaler.is_enabled() else None
        self.total = 0
        self._pending: torch.Tensor | None = None
        self._before: torch.Tensor | None = None

    def before_step(self) -> None:
        if self.scaler is not None:
            self._before = self.scaler._get_scale_async().clone()

    def after_step(self) -> None:
        if self.scaler is None or self._before is None:
            return
        skipped = (self.scaler._get_scale_async() < self._before).int()
        self._pending = skipped if self._pending is None else self._pending + skipped

    def read(self) -> int:
        if self._pending is not None:
            self.total += int(self._pending.item())
            self._pending = None
        return self.total


class _Diverged(Exception):
    """A non-finite loss: the message says where and what value."""


class _LossWatch:
    """Micro-batch losses: checked for NaN/inf, and averaged per epoch.

    Losses stay on the device and are read back in one transfer every `every` micro-batches
    (see LOSS_CHECK_EVERY_ON_GPU), and at every checkpoint and epoch end.
    """

    def __init__(self, every: int) -> None:
        self.every = every
        self.pending: list[tuple[torch.Tensor, int, int]] = []
        self.sum, self.count, self.last = 0.0, 0, math.nan

    def add(self, loss: torch.Tensor, epoch: int, step: int) -> None:
        self.pending.append((loss.detach(), epoch, step))
        if len(self.pending) >= self.every:
            self.check()

    def check(self) -> None:
        """Read the pending losses; raise _Diverged at the first non-finite one."""
        if not self.pending:
            return
        if len(self.pending) == 1:
            values = [self.pending[0][0].item()]
        else:
            values = torch.stack([loss for loss, _, _ in self.pending]).float().tolist()
        for value, (_, epoch, step) in zip(values, self.pending, strict=True):
            if not math.isfinite(value):
                raise _Diverged(f"loss is {value} at epoch {epoch + 1}, step {step + 1}")
        self.pending.clear()
        self.sum += math.fsum(values)
        self.count += len(values)
        self.last = values[-1]

    def end_epoch(self) -> float:
        """The epoch's mean loss; starts the next epoch's."""
        self.check()
        mean = self.sum / max(1, self.count)
        self.sum, self.count = 0.0, 0
        return mean


def _fresh_accelerator(precision: str, grad_accum_steps: int, device: torch.device) -> Accelerator:
    # A worker trains many trials in one process, each with its own precision and accumulation:
    # each gets a fresh accelerator, built so that the environment cannot override either
    # (see trainer.accelerate_env).
    # AcceleratedOptimizer.step asks importlib whether the `lomo_optim` package is installed,
    # twice per call and uncached (accelerate 1.x): ~60 µs a step, 5% of a small model's step
    # on a CPU. Whether a package is installed does not change during a run: ask once.
    check = getattr(accelerate.optimizer, "is_lomo_available", None)
    if check is not None and not hasattr(check, "cache_info"):
        accelerate.optimizer.is_lomo_available = functools.cache(check)
    mixed_precision = {"bf16": "bf16", "fp16": "fp16", "fp32": "no"}[precision]
    return accelerator_for_trial(mixed_precision, grad_accum_steps, device)


def _warmup_cosine(total_steps: int) -> Callable[[int], float]:
    """Learning-rate factor per optimizer step: linear warmup, then cosine decay to 0."""
    warmup = max(1, round(WARMUP_FRACTION * total_steps))

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        done = (step - warmup) / max(1, total_steps - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, done)))

    return factor


@torch.inference_mode()
def _evaluate(
    model: torch.nn.Module,
    task: Task,
    batches: Iterator[tuple[Any, Any]],
    stopped: Callable[[], bool] | None = None,
) -> float | None:
    """The task's metric on the validation set; None if `stopped()` said so before a batch.

    A streaming metric (a torchmetrics ``Metric``, or anything with reset/update/compute) sees
    one batch at a time, so no more than a batch of outputs is ever held; a plain function gets
    the whole set's outputs at once (simple, but they must all fit on the device).
    """
    model.eval()
    metric = task.metric_fn
    guarded = _UntilStopped(stopped, batches)
    if all(hasattr(metric, name) for name in ("reset", "update", "compute")):
        metric.reset()
        for inputs, target in guarded:
            outputs = model(inputs)
            if hasattr(metric, "to"):
                metric.to(outputs.device)  # a no-op after the first batch
            metric.update(outputs, target)
        return None if guarded.stopped else float(metric.compute())
    outputs, targets = [], []
    for inputs, target in guarded:
        outputs.append(model(inputs))
        targets.append(target)
    return None if guarded.stopped else float(metric(torch.cat(outputs), torch.cat(targets)))


class _UntilStopped:
    """`batches` until `stopped()` is true before one of them (asked before every batch, on
    every rank alike, as a data-parallel stop is a collective; not after the last one);
    `.stopped` says whether it was. With `stopped` None, every batch."""

    def __init__(
        self, stopped: Callable[[], bool] | None, batches: Iterator[tuple[Any, Any]]
    ) -> None:
        self._ask, self._batches, self.stopped = stopped, batches, False

    def __iter__(self) -> _UntilStopped:
        return self

    def __next__(self) -> tuple[Any, Any]:
        if self.stopped:
            raise StopIteration
        batch = next(self._batches)  # the end of the set: a finished validation, no question
        if self._ask is not None and self._ask():
            self.stopped = True
            raise StopIteration
        return batch


def _load_checkpoint(checkpoints: CheckpointStore | None, fingerprint: str) -> dict | None:
    """The store's checkpoint if it belongs to this run; otherwise None (and say why)."""
    if checkpoints is None:
        return None
    try:
        state = checkpoints.load()
    except CheckpointError as exc:
        log.warning("%s: %s; starting from scratch", checkpoints, exc)
        return None
    if state is None:
        return None
    if state.get("format") != CHECKPOINT_FORMAT:
        log.warning(
            "%s holds a checkpoint in an older layout (format %s, this trainer writes %d): "
            "restarting the trial from its start",
            checkpoints,
            state.get("format"),
            CHECKPOINT_FORMAT,
        )
        return None
    if state.get("fingerprint") != fingerprint:
        log.warning(
            "%s holds a checkpoint of another run (fingerprint %s, this run %s): ignoring it "
            "and starting from scratch",
            checkpoints,
            state.get("fingerprint"),
            fingerprint,
        )
        return None
    return state


def _task_id(task_factory: TaskFactory) -> str:
    module = getattr(task_factory, "__module__", None) or type(task_factory).__module__
    name = getattr(task_factory, "__qualname__", None) or type(task_factory).__qualname__
    return f"{module}:{name}"


def _config_identity(config: TrainConfig) -> dict[str, Any]:
    """The config fields that change the run's result (how often it checkpoints does not)."""
    identity = {k: v for k, v in asdict(config).items() if k != "checkpoint_every_s"}
    if not config.deterministic:
        del identity["deterministic"]  # checkpoints written before the option keep resuming
    if config.sharding == "none":
        del identity["sharding"]  # likewise
    return identity


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # every device's generator


@contextlib.contextmanager
def _sigterm_flag() -> Iterator[threading.Event | None]:
    """While `train` runs in the main thread, SIGTERM sets a flag that the loop checks before
    each step (a handler runs between two bytecodes of the loop: it must not save by itself).
    A previous Python handler (the worker's) still runs; it is restored on the way out."""
    if threading.current_thread() is not threading.main_thread():
        yield None  # only the main thread may install signal handlers
        return
    flag = threading.Event()
    previous = signal.getsignal(signal.SIGTERM)

    def handler(signum: int, frame: Any) -> None:
        flag.set()
        if callable(previous):
            previous(signum, frame)

    signal.signal(signal.SIGTERM, handler)
    try:
        yield flag
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def _release_memory(device: torch.device) -> None:
    gc.collect()  # the accelerator and its wrappers hold reference cycles
    if device.type == "cuda":
        torch.cuda.empty_cache()
