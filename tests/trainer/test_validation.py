"""Validation: a streaming metric (torchmetrics) sees one batch at a time; a plain function
still gets every output at once; both under torch.inference_mode."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torchmetrics.classification import MulticlassAccuracy

from tests.helpers.toy_task import ToyTask
from trainer import TrainConfig, train


class Recording(MulticlassAccuracy):
    """MulticlassAccuracy that remembers the batch sizes it was fed and the mode it ran in."""

    def __init__(self) -> None:
        super().__init__(num_classes=4, average="micro")
        self.batches: list[int] = []
        self.inference: list[bool] = []

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        self.batches.append(len(preds))
        self.inference.append(torch.is_inference_mode_enabled())
        super().update(preds, target)


def test_a_torchmetrics_metric_streams_and_scores_like_the_plain_function() -> None:
    config = TrainConfig(epochs=2, grad_accum_steps=2)
    plain = train(ToyTask(), {"batch_size": 32}, config, device="cpu")
    task = ToyTask()
    metric = Recording()

    def with_metric(params: dict[str, Any]) -> Any:
        built = task(params)
        built.metric_fn = metric
        return built

    streamed = train(with_metric, {"batch_size": 32}, config, device="cpu")
    assert streamed.status == "completed"
    assert streamed.metrics == pytest.approx(plain.metrics, abs=1e-6)
    # 64 validation samples in batches of the micro-batch (16): never all outputs at once
    assert metric.batches == [16] * 4 * 2 and all(metric.inference)


def test_a_plain_metric_gets_the_whole_set_under_inference_mode() -> None:
    calls: list[tuple[int, bool]] = []

    def metric(outputs: torch.Tensor, targets: torch.Tensor) -> float:
        calls.append((len(outputs), torch.is_inference_mode_enabled()))
        return (outputs.argmax(1) == targets).float().mean().item()

    task = ToyTask()

    def factory(params: dict[str, Any]) -> Any:
        built = task(params)
        built.metric_fn = metric
        return built

    result = train(factory, {"batch_size": 32}, TrainConfig(epochs=2), device="cpu")
    assert result.status == "completed" and calls == [(64, True), (64, True)]
