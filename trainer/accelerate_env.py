"""Building an `Accelerator` for one trial: nothing in the environment overrides the trainer's
decisions, and the process-wide state accelerate keeps is reused from trial to trial.

Accelerate reads its settings from the environment as well as from its arguments, so a variable
left over from ``accelerate launch``, torchrun or a shell profile would silently change a trial:

- ``ACCELERATE_GRADIENT_ACCUMULATION_STEPS`` replaces the accumulation the trainer asked for
  (it is read whenever no plugin is passed);
- ``LOCAL_RANK`` (and, on a CPU, ``WORLD_SIZE`` or an MPI size) switches to distributed mode:
  accelerate then sets up a process group and waits for peers that never come;
- ``ACCELERATE_USE_CPU``, ``ACCELERATE_TORCH_DEVICE``, ``ACCELERATE_DYNAMO_BACKEND``,
  ``ACCELERATE_USE_DEEPSPEED`` / ``_FSDP`` / ``_MEGATRON_LM`` ... change the device, compile the
  model or wrap it in another engine.

`accelerator_for_trial` hides these while the Accelerator is built (and the accumulation goes
in as a plugin), and warns once per variable. The distributed ones are left alone when
``torch.distributed`` is already initialized: then the caller set up data parallelism on
purpose and accelerate should join it.

Accelerate's ``PartialState`` (the process's device and distributed setup) is a process-wide
singleton whose set-up runs ``nvidia-smi`` on CUDA (a peer-to-peer check). It is kept between
trials of a worker when it was made for the same kind of device; only the per-trial states
(``AcceleratorState``: precision; ``GradientState``: accumulation) are reset. That peer-to-peer
check also refuses RTX 40xx cards on older drivers unless NCCL_P2P_DISABLE and NCCL_IB_DISABLE
are set; it concerns communication between GPUs, which a one-device trial has none of, so it is
skipped for a process that is not distributed.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

import accelerate.state
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState, PartialState
from accelerate.utils import GradientAccumulationPlugin

__all__ = ["DISTRIBUTED_VARIABLES", "OVERRIDING_VARIABLES", "accelerator_for_trial"]

log = logging.getLogger("trainer")

OVERRIDING_VARIABLES = (
    "ACCELERATE_GRADIENT_ACCUMULATION_STEPS",
    "ACCELERATE_MIXED_PRECISION",
    "ACCELERATE_USE_CPU",
    "ACCELERATE_TORCH_DEVICE",
    "ACCELERATE_DYNAMO_BACKEND",
    "ACCELERATE_DYNAMO_MODE",
    "ACCELERATE_DYNAMO_USE_FULLGRAPH",
    "ACCELERATE_DYNAMO_USE_DYNAMIC",
    "ACCELERATE_USE_DEEPSPEED",
    "ACCELERATE_USE_FSDP",
    "ACCELERATE_USE_MEGATRON_LM",
    "ACCELERATE_USE_SAGEMAKER",
    "ACCELERATE_USE_PARALLELISM_CONFIG",
    "ACCELERATE_DOWNCAST_BF16",
)
"""accelerate settings the trainer decides itself (precision, accumulation, device, engine)."""

DISTRIBUTED_VARIABLES = (
    "LOCAL_RANK",
    "WORLD_SIZE",
    "PMI_SIZE",
    "OMPI_COMM_WORLD_SIZE",
    "MV2_COMM_WORLD_SIZE",
)
"""What makes accelerate start distributed training (see the module docstring)."""

_WARNED: set[tuple[str, str]] = set()


def accelerator_for_trial(
    mixed_precision: str, grad_accum_steps: int, device: torch.device
) -> Accelerator:
    """A fresh Accelerator for one trial on `device` (the caller places model and data)."""
    _reset_trial_state(device)
    if device.type == "cuda":
        torch.cuda.set_device(device)  # accelerate uses the current device for autocast and scaler
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    hidden = OVERRIDING_VARIABLES if distributed else OVERRIDING_VARIABLES + DISTRIBUTED_VARIABLES
    with _hidden(hidden), _p2p_check_skipped(not distributed):
        return Accelerator(
            mixed_precision=mixed_precision,
            gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=grad_accum_steps),
            cpu=device.type == "cpu",
            device_placement=False,  # the trainer places model and data itself
        )


def _reset_trial_state(device: torch.device) -> None:
    """Forget the previous trial's precision and accumulation; keep the process's PartialState
    if it was made for this kind of device (a CPU run and a GPU run need different ones)."""
    partial = PartialState._shared_state
    keep = bool(partial) and partial.get("_cpu") == (device.type == "cpu")
    AcceleratorState._reset_state(reset_partial_state=not keep)
    GradientState._reset_state()


@contextlib.contextmanager
def _p2p_check_skipped(skip: bool) -> Iterator[None]:
    """accelerate's GPU peer-to-peer check (nvidia-smi) answers "supported" while `skip`."""
    check = accelerate.state.check_cuda_p2p_ib_support
    if skip:
        accelerate.state.check_cuda_p2p_ib_support = lambda: True
    try:
        yield
    finally:
        accelerate.state.check_cuda_p2p_ib_support = check


@contextlib.contextmanager
def _hidden(names: tuple[str, ...]) -> Iterator[None]:
    """Remove `names` from the environment for the block (warning once for each), then put
    them back as they were."""
    saved = {name: os.environ.pop(name) for name in names if name in os.environ}
    for name, value in saved.items():
        if (name, value) not in _WARNED:
            _WARNED.add((name, value))
            log.warning(
                "ignoring %s=%s from the environment: the trainer sets accelerate up itself "
                "(precision, accumulation, device; one process per trial)",
                name,
                value,
            )
    try:
        yield
    finally:
        os.environ.update(saved)
