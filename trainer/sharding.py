"""Sharded training (``[train] sharding = "fsdp"``): the model wrapped with FSDP2, and its
weights and optimizer state moved in and out of checkpoints whether sharded or not.

With FSDP each of the K ranks of a trial keeps 1/K of every parameter, of its gradient and of
the optimizer's state (ZeRO-3); a layer's full weights exist only while it computes (gathered
before its forward and backward, freed after). The data is split over the ranks exactly as for
DDP (`TrainData.steps` with a shard), so the same seed trains the same curve.

Why ``fully_shard`` directly and not accelerate's ``FullyShardedDataParallelPlugin``: accelerate
1.15 turns its FSDP mode on only for the GPU-like distributed types (``AcceleratorState``: the
plugin is read under MULTI_GPU, MULTI_XPU, ...; on MULTI_CPU it is ignored and the model gets
DDP), so its path cannot run, nor be tested, on CPU ranks over gloo. Calling ``fully_shard``
here gives one path, the same on gloo and NCCL; accelerate still does what it does for DDP
runs: accumulation (``accumulate`` / ``sync_gradients``), the fp16 loss scaler and the
optimizer wrapper. Mixed precision is FSDP's own ``MixedPrecisionPolicy`` (weights gathered in
the trial's precision, gradients reduced in fp32, fp32 master weights sharded), not autocast.

Caveats: gradients are reduce-scattered after every micro-batch, also while accumulating (the
memory-lean choice: no rank ever holds a full unsharded gradient); a multi-rank trial does not
adapt to out-of-memory errors (as for DDP).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

__all__ = [
    "UNIT_MIN_PARAMS",
    "is_sharded",
    "load_weights",
    "shard_model",
    "unit_sizes",
    "weights_state",
]

UNIT_MIN_PARAMS = 1_000_000
"""A submodule with at least this many parameters (not already in a smaller unit) becomes its
own FSDP unit, gathered and freed on its own; the rest form the root unit. Smaller units lower
the peak (one unit's full weights at a time) at the cost of more, smaller collectives."""

_COMPUTE_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}


def shard_model(model: nn.Module, precision: str, device: torch.device) -> list[str]:
    """Wrap `model` in place with FSDP2 over the default process group, its shards on
    `device`; returns the names of the submodules made their own unit ("" is the root).

    Give it the model where it was built (the CPU): unit by unit, FSDP moves the unit's
    weights to `device` and keeps this rank's 1/K there, so no GPU ever holds the whole model.
    Call it before the optimizer is built: the optimizer must hold the sharded parameters.
    Every rank must have built the same weights (the trainer seeds every rank alike).
    """
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    dtype = _COMPUTE_DTYPES[precision]
    policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32 if dtype else None)
    units = list(unit_sizes(model))
    for name in units:
        if name:  # innermost first, the root last
            fully_shard(model.get_submodule(name), mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return units


def unit_sizes(model: nn.Module) -> dict[str, int]:
    """Parameters of each FSDP unit `shard_model` makes, by submodule name ("" the root):
    submodules of at least UNIT_MIN_PARAMS parameters of their own, innermost first (the
    size-based rule of FSDP1's auto-wrap: a parent counts only what its units leave)."""
    left: dict[str, int] = {}
    units: dict[str, int] = {}
    # Children before parents: named_modules is pre-order, so reverse it.
    for name, module in reversed(list(model.named_modules())):
        own = sum(p.numel() for p in module.parameters(recurse=False))
        left[name] = own + sum(left[child] for child in _children(name, module))
        if name and left[name] >= UNIT_MIN_PARAMS:
            units[name] = left[name]
            left[name] = 0
    units[""] = left[""]
    return units


def _children(name: str, module: nn.Module) -> list[str]:
    return [f"{name}.{child}" if name else child for child, _ in module.named_children()]


def is_sharded(model: nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def weights_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """{"model": ..., "optimizer": ...}: plain state dicts, or for a sharded model this rank's
    shards (DTensors, keyed by parameter name), as ``torch.distributed.checkpoint`` saves them."""
    if not is_sharded(model):
        return {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    return {"model": model_state, "optimizer": optimizer_state}


def load_weights(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Put a checkpoint's weights and optimizer state into `model` and `optimizer`.

    A sharded checkpoint (`trainer.checkpoint.read_shards`) is read with resharding: each rank
    reads the slices it now owns, whatever the number of ranks that wrote it (or into a plain
    model in one process). A plain checkpoint goes into a sharded model as full state dicts,
    each rank keeping its part.
    """
    from trainer.checkpoint import read_shards

    if state.get("shards") is not None:
        read_shards(state["shards"], model, optimizer)
    elif is_sharded(model):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

        set_state_dict(
            model,
            optimizer,
            model_state_dict=state["model"],
            optim_state_dict=_by_name(model, state["optimizer"]),
            options=StateDictOptions(full_state_dict=True),
        )
    else:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])


def _by_name(model: nn.Module, optimizer_state: dict[str, Any]) -> dict[str, Any]:
    """A plain optimizer state dict (parameters numbered in the order the optimizer got them:
    ``model.parameters()``, as the trainer builds it) keyed by parameter name instead, the
    form ``set_state_dict`` reads."""
    names = [name for name, _ in model.named_parameters()]
    return {
        "state": {names[i]: s for i, s in optimizer_state["state"].items()},
        "param_groups": [
            {**group, "params": [names[i] for i in group["params"]]}
            for group in optimizer_state["param_groups"]
        ],
    }
