"""Every random number generator a run draws from, saved into a checkpoint and restored from it.

The CUDA generator saved is the one of the device the run trains on, and it is restored onto
the device the resumed run trains on, whatever their indices: a trial checkpointed by a
``--gpus all`` child (which sees one GPU, ``cuda:0``) and resumed by a worker on ``cuda:3`` of an
eight-GPU machine gets its dropout stream back. (``torch.cuda.get_rng_state_all`` would save one
state per *visible* GPU, by index, and a machine with another GPU count could not restore it.)

When the CUDA state cannot be restored (the checkpoint was written on a CPU), `set_rng_state`
says so in one line: the resumed
run's random draws on the GPU (dropout) then differ from an uninterrupted run's.
"""

from __future__ import annotations

import random
from typing import Any, Protocol

import numpy as np
import torch

__all__ = ["CudaGenerators", "rng_state", "set_rng_state"]


class CudaGenerators(Protocol):
    """What is used of ``torch.cuda`` (tests pass a fake with a list of devices)."""

    def get_rng_state(self, device: torch.device) -> torch.Tensor: ...

    def set_rng_state(self, new_state: torch.Tensor, device: torch.device) -> None: ...

    def device_count(self) -> int: ...


def rng_state(device: torch.device, cuda: CudaGenerators | None = None) -> dict[str, Any]:
    """Every RNG the run on `device` draws from, in weights_only-loadable form (no numpy arrays).

    ``"cuda_device"`` is the generator state of `device` (None on the CPU).
    """
    version, internal, gauss = random.getstate()
    name, keys, position, has_gauss, cached_gaussian = np.random.get_state()
    cuda_state = None
    if device.type == "cuda":
        cuda_state = (cuda or torch.cuda).get_rng_state(device)
    return {
        "python": [version, list(internal), gauss],
        "numpy": [
            name,
            torch.from_numpy(keys.astype(np.int64)),
            position,
            has_gauss,
            cached_gaussian,
        ],
        "torch": torch.get_rng_state(),
        "cuda_device": cuda_state,
    }


def set_rng_state(
    state: dict[str, Any], device: torch.device, cuda: CudaGenerators | None = None
) -> str | None:
    """Restore `state` (from `rng_state`) for a run on `device`.

    Returns None when every generator the run draws from was restored, else one line saying
    what was not and what that changes.
    """
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, position, has_gauss, cached_gaussian = state["numpy"]
    np.random.set_state(
        (name, keys.numpy().astype(np.uint32), position, has_gauss, cached_gaussian)
    )
    torch.set_rng_state(state["torch"])
    if device.type != "cuda":
        return None  # nothing on this run draws from a CUDA generator
    cuda = cuda or torch.cuda
    saved = state.get("cuda_device")
    if saved is None:
        return (
            f"the checkpoint holds no CUDA generator state for {device} (it was written on a "
            "CPU): random draws on the GPU (dropout) differ from an uninterrupted run from here on"
        )
    cuda.set_rng_state(saved, device)
    return None
