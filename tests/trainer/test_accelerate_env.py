"""The environment cannot override the trainer's accelerate set-up; accelerate's process state
is set up once per process; fp16 skipped steps are counted; AdamW is fused on CUDA."""

from __future__ import annotations

import logging
import os
from typing import Any

import pytest
import torch
from accelerate.state import PartialState

from tests.helpers.toy_task import ToyTask
from trainer import TrainConfig, train
from trainer.loop import _SkippedSteps
from trainer.step import make_optimizer


def test_accelerate_variables_in_the_environment_do_not_change_the_run(
    monkeypatch: Any, caplog: Any
) -> None:
    config = TrainConfig(epochs=2, grad_accum_steps=2)
    plain_task = ToyTask()
    plain = train(plain_task, {"batch_size": 32}, config, device="cpu")
    leftovers = {
        "ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "8",  # would make 8 micro-batches a step
        "ACCELERATE_DYNAMO_BACKEND": "inductor",  # would compile the model
        "LOCAL_RANK": "0",  # with WORLD_SIZE: distributed on the CPU, waiting for a peer
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "1",
    }
    for name, value in leftovers.items():
        monkeypatch.setenv(name, value)
    task = ToyTask()
    with caplog.at_level(logging.WARNING, logger="trainer"):
        result = train(task, {"batch_size": 32}, config, device="cpu")
    assert result.status == "completed", result.reason
    assert result.optimizer_steps == plain.optimizer_steps == 2 * 4
    assert task.models[0].train_batch_sizes == plain_task.models[0].train_batch_sizes
    assert set(task.models[0].train_batch_sizes) == {16}  # 2 micro-batches of 16, not 8 of 4
    assert result.metrics == plain.metrics
    for name in ("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "LOCAL_RANK", "WORLD_SIZE"):
        assert f"ignoring {name}={leftovers[name]} from the environment" in caplog.text
    assert {name: os.environ[name] for name in leftovers} == leftovers  # put back afterwards


def test_accelerate_process_state_is_set_up_once_for_many_trials(monkeypatch: Any) -> None:
    PartialState._reset_state()
    setups: list[bool] = []
    original = PartialState._prepare_backend

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        setups.append(True)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(PartialState, "_prepare_backend", counting)
    for precision in ("bf16", "fp32", "bf16"):  # each trial its own precision
        result = train(ToyTask(), {}, TrainConfig(epochs=1, precision=precision), device="cpu")
        assert result.status == "completed" and result.precision == precision
    assert setups == [True]  # on CUDA, each set-up would run nvidia-smi


def test_fp16_skipped_steps_are_counted_without_reading_the_scale_each_step() -> None:
    weight = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    skipped = _SkippedSteps(scaler)
    for grad in (float("inf"), 1.0, float("nan"), 1.0, 1.0):
        scaler.scale(weight.sum())  # sets the scale up, as a backward pass would
        weight.grad = torch.full((3,), grad)
        skipped.before_step()
        scaler.step(optimizer)
        scaler.update()
        skipped.after_step()
    assert skipped.read() == 2
    assert scaler.get_scale() == 2.0**14  # halved twice
    assert _SkippedSteps(None).read() == 0


@pytest.mark.parametrize(("device", "fused"), [("cpu", False), ("cuda", True)])
def test_adamw_is_fused_on_cuda(device: str, fused: bool) -> None:
    model = torch.nn.Linear(4, 2)
    optimizer = make_optimizer("adamw", model.parameters(), 1e-3, 0.0, torch.device(device))
    assert bool(optimizer.defaults["fused"]) is fused


def test_settings_are_stated_once_per_trial_with_the_precision(caplog: Any) -> None:
    for deterministic in (False, True):
        with caplog.at_level(logging.INFO, logger="trainer"):
            caplog.clear()
            config = TrainConfig(epochs=1, deterministic=deterministic)
            result = train(ToyTask(), {}, config, device="cpu")
        lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("precision")]
        assert lines == [f"precision fp32 ({result.precision_reason}); {result.device_settings}"]
        assert result.device_settings.startswith("cpu: deterministic kernels")
        assert torch.are_deterministic_algorithms_enabled() is deterministic
