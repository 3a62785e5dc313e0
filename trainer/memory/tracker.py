"""Every tensor storage torch creates, and when each is freed: a dispatch mode whose replay gives
a step's peak and its parts (`trainer.memory.dry_run` on fake tensors; real ones count too)."""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

__all__ = ["CUDA_BLOCK", "Replay", "StorageTracker"]

CUDA_BLOCK = 512
"""The CUDA caching allocator rounds every tensor up to a multiple of 512 bytes (what
``torch.cuda.max_memory_allocated`` counts); a dry run for a GPU rounds the same way."""


@dataclass
class Replay:
    peak: int = 0
    activations: int = 0
    step_temporaries: int = 0


class StorageTracker(TorchDispatchMode):
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

    def replay(self, kinds: dict[int, str], *, start: int, step_start: int, end: int) -> Replay:
        """Peaks within events [start, end): of everything, and of what is not weights,
        gradients or optimizer state, before `step_start` (activations) and after (the
        optimizer step's temporaries)."""
        out = Replay()
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
