"""trainer.data: the cut of an epoch into steps, its reproducible order, both data paths."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import Dataset, TensorDataset

from trainer.data import TrainData, fingerprint

CPU = torch.device("cpu")


class Items(Dataset):
    """A plain map-style dataset (not a TensorDataset): goes through a DataLoader."""

    def __init__(self, tensors: TensorDataset) -> None:
        self.tensors = tensors

    def __len__(self) -> int:
        return len(self.tensors)

    def __getitem__(self, i: int) -> Any:
        return self.tensors[i]


def _dataset(n: int) -> TensorDataset:
    return TensorDataset(torch.arange(n, dtype=torch.float32)[:, None], torch.arange(n))


def test_an_epoch_is_full_steps_covering_every_sample() -> None:
    data = TrainData(_dataset(100), batch_size=16, device=CPU, seed=0)
    assert data.steps_per_epoch == 6
    steps = list(data.steps(data.order(0), 1))
    sizes = [len(batch[0][1]) for _, batch in steps]
    assert sizes == [17, 17, 17, 17, 16, 16]
    seen = torch.cat([batch[0][1] for _, batch in steps])
    assert sorted(seen.tolist()) == list(range(100))


def test_micro_batch_weights_make_the_mean_over_the_step() -> None:
    data = TrainData(_dataset(100), batch_size=16, device=CPU, seed=0)
    _, batch = next(data.steps(data.order(0), 3))
    assert [len(targets) for _, targets, _ in batch] == [6, 6, 5]
    assert sum(weight for _, _, weight in batch) == 3  # accelerate divides by 3
    assert [weight for _, _, weight in batch] == [3 * 6 / 17, 3 * 6 / 17, 3 * 5 / 17]


def test_order_depends_on_seed_and_epoch_only_and_resumes_mid_epoch() -> None:
    a = TrainData(_dataset(50), batch_size=8, device=CPU, seed=1)
    b = TrainData(_dataset(50), batch_size=8, device=CPU, seed=1)
    assert torch.equal(a.order(3), b.order(3))
    assert not torch.equal(a.order(3), a.order(4))
    assert not torch.equal(
        a.order(3), TrainData(_dataset(50), batch_size=8, device=CPU, seed=2).order(3)
    )
    full = [t for _, batch in a.steps(a.order(0), 2) for _, t, _ in batch]
    tail = [t for _, batch in a.steps(a.order(0), 2, start=4) for _, t, _ in batch]
    assert all(torch.equal(x, y) for x, y in zip(full[8:], tail, strict=True))


def test_a_plain_dataset_gets_the_same_batches_through_a_dataloader() -> None:
    preloaded = TrainData(_dataset(40), batch_size=8, device=CPU, seed=0)
    loaded = TrainData(Items(_dataset(40)), batch_size=8, device=CPU, seed=0)
    assert preloaded.tensors is not None and loaded.tensors is None
    order = preloaded.order(2)
    for (s1, b1), (s2, b2) in zip(
        preloaded.steps(order, 2, start=1), loaded.steps(order, 2, start=1), strict=True
    ):
        assert s1 == s2
        for (x1, y1, w1), (x2, y2, w2) in zip(b1, b2, strict=True):
            assert torch.equal(x1, x2) and torch.equal(y1, y2) and w1 == w2


def test_preloaded_micro_batches_are_views_not_copies() -> None:
    data = TrainData(_dataset(32), batch_size=8, device=CPU, seed=0)
    batches = [batch for _, batch in data.steps(data.order(0), 2)]
    base = batches[0][0][0].untyped_storage().data_ptr()
    assert all(x.untyped_storage().data_ptr() == base for batch in batches for x, _, _ in batch)


def test_fingerprint_is_stable_and_tells_data_apart() -> None:
    assert fingerprint(_dataset(10)) == fingerprint(_dataset(10))
    assert fingerprint(_dataset(10)) != fingerprint(_dataset(11))
    assert fingerprint(Items(_dataset(10))) == fingerprint(Items(_dataset(10)))
    assert fingerprint(Items(_dataset(10))) != fingerprint(Items(_dataset(12)))
