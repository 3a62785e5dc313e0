"""trainer.tasks.digits: the data split and the CNN."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from trainer.tasks.digits import DigitsCNN, make_task


def test_fixed_stratified_split() -> None:
    a, b = make_task({}), make_task({"width": 8})
    assert len(a.train_set) == 1437 and len(a.val_set) == 360
    assert torch.equal(a.val_set.tensors[0], b.val_set.tensors[0])
    counts = torch.bincount(a.val_set.tensors[1], minlength=10)
    assert counts.min() >= 35 and counts.max() <= 37  # every digit in proportion


def test_params_shape_the_model() -> None:
    model = make_task({"width": 12, "depth": 3, "dropout": 0.3}).model
    assert len(model.blocks) == 3
    assert model.blocks[1][0].out_channels == 12
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
    assert all(m.p == 0.3 for m in model.modules() if isinstance(m, nn.Dropout))
    assert model(torch.zeros(5, 1, 8, 8)).shape == (5, 10)


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_gradient_checkpointing_gives_identical_gradients(dropout: float) -> None:
    torch.manual_seed(0)
    model = DigitsCNN(width=16, depth=3, dropout=dropout)
    x, y = torch.randn(32, 1, 8, 8), torch.randint(0, 10, (32,))
    grads = []
    for checkpointing in (False, True):
        model.grad_checkpointing = checkpointing
        model.zero_grad()
        torch.manual_seed(1)  # the same dropout masks in both passes
        nn.functional.cross_entropy(model(x), y).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    for name, grad in grads[0].items():
        assert torch.equal(grad, grads[1][name]), name


def test_gradient_checkpointing_recomputes_in_backward() -> None:
    model = DigitsCNN(width=8, depth=2)
    calls = []
    model.blocks[0].register_forward_pre_hook(lambda *args: calls.append(1))
    model.grad_checkpointing = True
    model(torch.randn(4, 1, 8, 8)).sum().backward()
    assert len(calls) == 2  # forward, then again in backward
    calls.clear()
    with torch.no_grad():
        model.eval()
        model(torch.randn(4, 1, 8, 8))
    assert len(calls) == 1  # no recomputation outside training
