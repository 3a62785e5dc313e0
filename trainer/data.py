"""Training data as optimizer steps of micro-batches, in a reproducible, resumable order.

An epoch's order is a permutation drawn from a generator seeded by (seed, epoch), so a run
resumed in the middle of an epoch sees exactly the batches it would have seen.

A `TensorDataset` that fits is copied to the device once (`preload`); each epoch gathers it in
the epoch's order with one ``index_select`` and the micro-batches are slices (views) of that, so
a training step does no host-to-device copy and no per-sample Python. Any other map-style
dataset goes through a ``DataLoader`` whose batch sampler replays the same order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

__all__ = ["MicroBatch", "TrainData", "eval_batches", "preload"]

MicroBatch = tuple[Any, torch.Tensor, float]
"""(inputs, targets, loss weight); see `TrainData.steps` for the weight."""

PRELOAD_FRACTION_OF_FREE_GPU_MEMORY = 0.25
"""A TensorDataset is preloaded to a GPU if it takes at most this share of its free memory
(twice, for the train set: the data plus its per-epoch shuffled copy)."""

FINGERPRINT_SAMPLES = 64
"""Items hashed for the fingerprint of a dataset that is not a TensorDataset."""


def preload(dataset: Dataset[Any], device: torch.device) -> tuple[torch.Tensor, ...] | None:
    """(inputs, targets) on `device` if the dataset is such a TensorDataset that fits there."""
    if not isinstance(dataset, TensorDataset) or len(dataset.tensors) != 2:
        return None
    if device.type == "cuda":
        size = sum(t.nbytes for t in dataset.tensors)
        free, _total = torch.cuda.mem_get_info(device)
        if 2 * size > PRELOAD_FRACTION_OF_FREE_GPU_MEMORY * free:
            return None
    return tuple(t.to(device) for t in dataset.tensors)


class TrainData:
    """The training set cut into optimizer steps.

    An epoch is ``len(dataset) // batch_size`` optimizer steps; the leftover
    ``len(dataset) % batch_size`` samples are spread one each over the first steps, so no sample
    is skipped and no step is smaller than `batch_size`. (A short last step could not be split
    into `grad_accum_steps` micro-batches, and accelerate's accumulation window, which counts
    micro-batches, would then straddle two optimizer steps.) The cut does not depend on the
    accumulation, so adapting it after an out-of-memory error keeps the same steps.
    """

    def __init__(
        self, dataset: Dataset[Any], *, batch_size: int, device: torch.device, seed: int
    ) -> None:
        self.dataset = dataset
        self.size = len(dataset)  # type: ignore[arg-type]
        self.batch_size = batch_size
        self.device = device
        self.seed = seed
        n_steps = max(1, self.size // batch_size)
        base, extra = divmod(self.size, n_steps)
        sizes = [base + 1] * extra + [base] * (n_steps - extra)
        self.bounds = [(sum(sizes[:i]), sum(sizes[: i + 1])) for i in range(n_steps)]
        self.tensors = preload(dataset, device)
        self.fingerprint = fingerprint(dataset)

    @property
    def steps_per_epoch(self) -> int:
        return len(self.bounds)

    def order(self, epoch: int) -> torch.Tensor:
        """The epoch's permutation of sample indices (int64, on the CPU), from (seed, epoch)."""
        key = hashlib.sha256(f"trainer data order {self.seed} {epoch}".encode()).digest()
        generator = torch.Generator().manual_seed(int.from_bytes(key[:8], "little"))
        return torch.randperm(self.size, generator=generator)

    def steps(
        self,
        order: torch.Tensor,
        micro_batches: int,
        *,
        start: int = 0,
        shard: tuple[int, int] = (0, 1),
    ) -> Iterator[tuple[int, list[MicroBatch]]]:
        """(step, micro-batches) for the epoch with this order, from step `start` on.

        Each step's samples are split into `micro_batches` near-equal micro-batches. Each
        carries a loss weight ``micro_batches * len(micro) / len(step)``: accelerate divides every
        micro-batch loss by `micro_batches`, so with the weight the accumulated gradient is the
        gradient of the mean loss over the whole step even when the sizes differ (1.0 when they
        are equal).

        `shard` = (rank, ranks) of a data-parallel run: the step is cut into
        ``ranks * micro_batches`` pieces and this rank takes its `micro_batches` of them, so the
        step (the effective batch) is the same for any number of ranks. The weight is then
        ``ranks * micro_batches * len(micro) / len(step)``, since DDP averages the gradients
        over the ranks.
        """
        rank, ranks = shard
        pieces = micro_batches * ranks
        if self.steps_per_epoch and min(b - a for a, b in self.bounds) < pieces:
            raise ValueError(
                f"batch_size {self.batch_size} cannot be cut into {ranks} rank(s) x "
                f"{micro_batches} micro-batch(es) of at least one sample"
            )
        splits = {
            step: self._split(step, pieces)[rank * micro_batches : (rank + 1) * micro_batches]
            for step in range(start, len(self.bounds))
        }
        if self.tensors is not None:
            # One gather per epoch; every micro-batch below is a view of it.
            index = order.to(self.device)
            inputs, targets = (t.index_select(0, index) for t in self.tensors)
            for step, split in splits.items():
                yield step, [(inputs[a:b], targets[a:b], weight) for a, b, weight in split]
            return
        samplers = [order[a:b].tolist() for split in splits.values() for a, b, _ in split]
        loader = iter(
            DataLoader(
                self.dataset,
                batch_sampler=samplers,
                pin_memory=self.device.type == "cuda",
                generator=_own_generator(),
            )
        )
        for step, split in splits.items():
            batch = []
            for _a, _b, weight in split:
                inputs, targets = next(loader)
                batch.append((_to(inputs, self.device), _to(targets, self.device), weight))
            yield step, batch

    def _split(self, step: int, micro_batches: int) -> list[tuple[int, int, float]]:
        start, end = self.bounds[step]
        base, extra = divmod(end - start, micro_batches)
        splits, a = [], start
        for i in range(micro_batches):
            b = a + base + (i < extra)
            splits.append((a, b, micro_batches * (b - a) / (end - start)))
            a = b
        return splits


def eval_batches(
    dataset: Dataset[Any],
    tensors: tuple[torch.Tensor, ...] | None,
    *,
    batch_size: int,
    device: torch.device,
) -> Iterator[tuple[Any, torch.Tensor]]:
    """The validation set in its own order, `batch_size` samples at a time, on `device`."""
    if tensors is not None:
        inputs, targets = tensors
        for a in range(0, len(targets), batch_size):
            yield inputs[a : a + batch_size], targets[a : a + batch_size]
        return
    loader = DataLoader(
        dataset, batch_size=batch_size, pin_memory=device.type == "cuda", generator=_own_generator()
    )
    for inputs, targets in loader:
        yield _to(inputs, device), _to(targets, device)


def fingerprint(dataset: Dataset[Any]) -> str:
    """A stable hash of the data (recorded with every trial: which data trained it).

    A TensorDataset is hashed whole (its bytes, shapes and dtypes). Any other dataset is hashed
    by its length and `FINGERPRINT_SAMPLES` items spread evenly over it, which tells data sets
    apart without reading all of a large one.
    """
    digest = hashlib.sha256()
    if isinstance(dataset, TensorDataset):
        for tensor in dataset.tensors:
            _hash_tensor(digest, tensor)
        return digest.hexdigest()[:16]
    size = len(dataset)  # type: ignore[arg-type]
    digest.update(f"len={size}".encode())
    for i in sorted({i * size // FINGERPRINT_SAMPLES for i in range(FINGERPRINT_SAMPLES)}):
        if i < size:
            for part in dataset[i]:
                if isinstance(part, torch.Tensor):
                    _hash_tensor(digest, part)
                else:
                    digest.update(repr(part).encode())
    return digest.hexdigest()[:16]


def _hash_tensor(digest: Any, tensor: torch.Tensor) -> None:
    digest.update(f"{tensor.dtype}{tuple(tensor.shape)}".encode())
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    digest.update(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")


def _own_generator() -> torch.Generator:
    """A DataLoader draws a seed for its workers from this, else from torch's global RNG: that
    would shift the dropout masks, and differently in a run resumed mid-epoch."""
    return torch.Generator().manual_seed(0)


def _to(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device, non_blocking=True)
    if isinstance(value, (list, tuple)):
        return type(value)(_to(v, device) for v in value)
    if isinstance(value, dict):
        return {k: _to(v, device) for k, v in value.items()}
    return value
