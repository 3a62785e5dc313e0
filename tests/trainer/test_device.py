"""trainer.device: the precision a run gets, and why."""

from __future__ import annotations

import pytest
import torch

from trainer.device import choose_precision, resolve_device

CPU = torch.device("cpu")


@pytest.mark.parametrize(
    ("requested", "used", "why"),
    [
        ("auto", "fp32", "auto on the CPU"),
        ("fp32", "fp32", "fp32 requested"),
        ("bf16", "bf16", "bf16 requested"),
        ("fp16", "fp32", "needs a CUDA GPU"),
    ],
)
def test_precision_on_cpu(requested: str, used: str, why: str) -> None:
    precision, reason = choose_precision(requested, CPU)
    assert precision == used and why in reason


def test_resolve_device() -> None:
    assert resolve_device("cpu") == CPU
    if not torch.cuda.is_available():
        assert resolve_device(None) == CPU
        with pytest.raises(ValueError, match="CUDA is not available"):
            resolve_device("cuda:0")
    with pytest.raises(ValueError, match="use cpu, cuda or cuda:N"):
        resolve_device("meta")
    with pytest.raises(ValueError, match="'gpu'"):
        resolve_device("gpu")
