"""Small real tasks for the trainer's tests: they train in well under a second on a CPU."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from trainer import DirectoryCheckpointStore, Task
from trainer.tasks.digits import accuracy


class ToyModel(nn.Module):
    """A two-layer MLP that records what it was called with (sizes, autocast state)."""

    def __init__(self, *, width: int = 32, dropout: float = 0.0, oom_above: Any = None) -> None:
        super().__init__()
        self.hidden = nn.Linear(16, width)
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(width, 4)
        self.grad_checkpointing = False
        self.oom_above = oom_above
        """A dict {"batch": n}: a training batch larger than n raises torch.OutOfMemoryError,
        unless gradient checkpointing is on and {"checkpointing": True} (it then fits)."""
        self.train_batch_sizes: list[int] = []
        self.autocast_dtypes: list[torch.dtype | None] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.train_batch_sizes.append(len(x))
            limit = self.oom_above
            checkpointing_fits = self.grad_checkpointing and limit and limit.get("checkpointing")
            if limit is not None and len(x) > limit["batch"] and not checkpointing_fits:
                raise torch.OutOfMemoryError(
                    f"CUDA out of memory. Tried to allocate {len(x)} samples' activations"
                )
        h = self.hidden(x)
        self.autocast_dtypes.append(h.dtype if torch.is_autocast_enabled("cpu") else None)
        return self.out(self.dropout(torch.relu(h)))


class ToyTask:
    """A task factory over fixed random data (4 classes, 16 features); keeps the models built."""

    def __init__(
        self, *, n_train: int = 128, n_val: int = 64, oom_above: Any = None, loss_fn: Any = None
    ) -> None:
        generator = torch.Generator().manual_seed(1234)
        x = torch.randn(n_train + n_val, 16, generator=generator)
        y = x[:, :4].argmax(dim=1)
        self.train_set = TensorDataset(x[:n_train], y[:n_train])
        self.val_set = TensorDataset(x[n_train:], y[n_train:])
        self.oom_above = oom_above
        self.loss_fn = loss_fn or F.cross_entropy
        self.models: list[ToyModel] = []

    def __call__(self, params: dict[str, Any]) -> Task:
        model = ToyModel(
            width=int(params.get("width", 32)),
            dropout=float(params.get("dropout", 0.0)),
            oom_above=self.oom_above,
        )
        self.models.append(model)
        return Task(
            model=model,
            train_set=self.train_set,
            val_set=self.val_set,
            loss_fn=self.loss_fn,
            metric_fn=accuracy,
        )


def weights(store: DirectoryCheckpointStore) -> dict[str, torch.Tensor]:
    """The model weights in a store's checkpoint."""
    state = store.load()
    assert state is not None
    return state["model"]


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), f"{name} differs"
