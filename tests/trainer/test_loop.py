"""trainer.train: statuses, accumulation, counters, precision, checkpoints, resume, OOM fitting."""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
from dataclasses import replace
from typing import Any

import pytest
import torch

from tests.helpers.toy_task import ToyTask, assert_same_weights, weights
from trainer import DirectoryCheckpointStore, TrainConfig, train
from trainer.tasks.digits import make_task as digits
from trainer.train_state import TrainState

DIGITS = {"lr": 3e-3, "batch_size": 64, "width": 8, "dropout": 0.1}


def _params(**changes: Any) -> dict[str, Any]:
    return {"lr": 1e-2, "batch_size": 32, **changes}


# --- completing, determinism ---------------------------------------------------------------


@pytest.mark.slow
def test_digits_trains_to_a_useful_accuracy_and_fills_the_result() -> None:
    result = train(digits, DIGITS, TrainConfig(epochs=3), device="cpu")
    assert result.status == "completed", result.reason
    assert result.epochs_run == len(result.metrics) == 3
    assert result.metrics[-1] > 0.8  # 10 classes: chance is 0.1
    assert result.train_losses[0] > result.train_losses[-1]
    assert result.precision == "fp32" and "CPU" in result.precision_reason
    assert result.device_name == "cpu"
    assert result.peak_memory_bytes > 0 and result.peak_memory_kind == "process_peak_rss"
    assert result.wall_seconds > 0
    assert len(result.data_fingerprint) == 16
    assert result.resumed_from is None and result.reason is None and result.adapted == []
    assert result.to_dict()["epochs_run"] == 3


@pytest.mark.slow
def test_same_seed_same_run_and_another_seed_another_run(tmp_path: Any) -> None:
    stores = [DirectoryCheckpointStore(tmp_path / name) for name in ("a", "b", "c")]
    config = TrainConfig(epochs=2, seed=5)
    a = train(digits, DIGITS, config, checkpoints=stores[0], device="cpu")
    b = train(digits, DIGITS, config, checkpoints=stores[1], device="cpu")
    train(digits, DIGITS, replace(config, seed=6), checkpoints=stores[2], device="cpu")
    assert a.metrics == b.metrics
    assert_same_weights(weights(stores[0]), weights(stores[1]))
    assert not torch.equal(weights(stores[0])["head.3.weight"], weights(stores[2])["head.3.weight"])


def test_a_plain_map_style_dataset_trains_like_the_tensor_dataset(tmp_path: Any) -> None:
    class Items(torch.utils.data.Dataset):
        def __init__(self, tensors: torch.utils.data.TensorDataset) -> None:
            self.tensors = tensors

        def __len__(self) -> int:
            return len(self.tensors)

        def __getitem__(self, i: int) -> Any:
            return self.tensors[i]

    class ItemsTask(ToyTask):
        def __call__(self, params: dict[str, Any]) -> Any:
            task = super().__call__(params)
            task.train_set, task.val_set = Items(task.train_set), Items(task.val_set)
            return task

    names = ("tensors", "items", "items-resumed")
    stores = [DirectoryCheckpointStore(tmp_path / name) for name in names]
    config = TrainConfig(epochs=2, grad_accum_steps=2)
    preloaded = train(ToyTask(), _params(dropout=0.1), config, checkpoints=stores[0], device="cpu")
    loaded = train(ItemsTask(), _params(dropout=0.1), config, checkpoints=stores[1], device="cpu")
    assert loaded.status == "completed" and loaded.metrics == preloaded.metrics
    assert_same_weights(weights(stores[0]), weights(stores[1]))
    # Stopped in the middle of epoch 2 and resumed: the same batches and dropout masks.
    stop = threading.Event()
    stopped = train(
        ItemsTask(),
        _params(dropout=0.1),
        config,
        checkpoints=stores[2],
        stop=stop,
        progress=lambda e, s, n, loss: (e, s) == (2, 1) and stop.set(),
        device="cpu",
    )
    assert stopped.status == "preempted"
    resumed = train(ItemsTask(), _params(dropout=0.1), config, checkpoints=stores[2], device="cpu")
    assert resumed.resumed_from == {"epoch": 1, "step": 1}
    assert resumed.metrics == preloaded.metrics
    assert_same_weights(weights(stores[0]), weights(stores[2]))


# --- accumulation and counters ---------------------------------------------------------------


@pytest.mark.parametrize("micro_batches", [4, 3])
def test_k_micro_batches_make_the_same_update_as_one_batch(
    store: Any, tmp_path: Any, micro_batches: int
) -> None:
    # fp32, no dropout, no BatchNorm: accumulation only reorders float sums. With k = 3, the
    # 32-sample batches split 11/11/10 and the loss weights keep the mean exact.
    whole = DirectoryCheckpointStore(tmp_path / "whole")
    config = TrainConfig(epochs=2, precision="fp32")
    one = train(ToyTask(), _params(), config, checkpoints=whole, device="cpu")
    task = ToyTask()
    accumulated = train(
        task,
        _params(),
        replace(config, grad_accum_steps=micro_batches),
        checkpoints=store,
        device="cpu",
    )
    assert one.status == accumulated.status == "completed"
    sizes = task.models[0].train_batch_sizes
    assert len(sizes) == 2 * 4 * micro_batches and sum(sizes) == 2 * 128
    assert max(sizes) <= math.ceil(32 / micro_batches)
    for name, value in weights(whole).items():
        torch.testing.assert_close(weights(store)[name], value, rtol=1e-5, atol=1e-6)
    assert one.metrics == pytest.approx(accumulated.metrics)


@pytest.mark.parametrize("micro_batches", [1, 3, 4])
def test_optimizer_and_scheduler_steps_per_epoch(micro_batches: int) -> None:
    # 100 samples in batches of 16: 6 steps of 17/17/17/17/16/16, not a multiple of 3 or 4.
    task = ToyTask(n_train=100)
    result = train(
        task,
        _params(batch_size=16),
        TrainConfig(epochs=3, grad_accum_steps=micro_batches),
        device="cpu",
    )
    assert result.status == "completed"
    assert result.steps_per_epoch == 6
    assert result.optimizer_steps == result.scheduler_steps == 18
    sizes = task.models[0].train_batch_sizes
    assert len(sizes) == 18 * micro_batches  # every micro-batch trained on, none empty
    assert sum(sizes) == 3 * 100 and min(sizes) > 0


@pytest.mark.slow
def test_counters_and_weights_survive_a_mid_epoch_stop_and_resume(
    store: Any, tmp_path: Any
) -> None:
    config = TrainConfig(epochs=3, grad_accum_steps=3)
    whole_store = DirectoryCheckpointStore(tmp_path / "whole")
    whole = train(
        ToyTask(n_train=100),
        _params(batch_size=16, dropout=0.2),
        config,
        checkpoints=whole_store,
        device="cpu",
    )
    stop = threading.Event()

    def progress(epoch: int, step: int, steps: int, loss: float) -> None:
        if (epoch, step) == (2, 4):
            stop.set()

    first = train(
        ToyTask(n_train=100),
        _params(batch_size=16, dropout=0.2),
        config,
        checkpoints=store,
        stop=stop,
        progress=progress,
        device="cpu",
    )
    assert first.status == "preempted"
    assert first.optimizer_steps == first.scheduler_steps == 6 + 4
    assert store.load()["train_state"]["loop"]["step"] == 4
    second = train(
        ToyTask(n_train=100),
        _params(batch_size=16, dropout=0.2),
        config,
        checkpoints=store,
        device="cpu",
    )
    assert second.status == "completed"
    assert second.resumed_from == {"epoch": 1, "step": 4}
    assert second.optimizer_steps == second.scheduler_steps == whole.optimizer_steps == 18
    assert second.metrics == whole.metrics and second.train_losses == whole.train_losses
    assert_same_weights(weights(store), weights(whole_store))


# --- precision -------------------------------------------------------------------------------


def test_bf16_on_cpu_runs_the_forward_pass_under_autocast() -> None:
    task = ToyTask()
    result = train(task, _params(), TrainConfig(epochs=2, precision="bf16"), device="cpu")
    assert result.status == "completed" and result.precision == "bf16"
    assert set(task.models[0].autocast_dtypes) == {torch.bfloat16}
    assert all(math.isfinite(m) for m in result.metrics)


@pytest.mark.parametrize(("requested", "reason"), [("fp16", "needs a CUDA GPU"), ("auto", "CPU")])
def test_fp16_and_auto_fall_back_to_fp32_on_cpu(requested: str, reason: str, caplog: Any) -> None:
    task = ToyTask()
    with caplog.at_level(logging.INFO, logger="trainer"):
        for _ in range(2):  # stated once per trial, with the device settings
            result = train(
                task, _params(), TrainConfig(epochs=1, precision=requested), device="cpu"
            )
    assert result.precision == "fp32" and reason in result.precision_reason
    assert set(task.models[0].autocast_dtypes) == {None}
    assert [r.message for r in caplog.records].count(
        f"precision fp32 ({result.precision_reason}); {result.device_settings}"
    ) == 2


def test_many_runs_in_one_process_with_different_precision_and_accumulation() -> None:
    # accelerate's state is process-wide; a worker trains trial after trial in one process.
    runs = [("bf16", 2), ("fp32", 1), ("bf16", 4), ("fp32", 3)]
    for precision, micro_batches in runs:
        task = ToyTask()
        config = TrainConfig(epochs=1, precision=precision, grad_accum_steps=micro_batches)
        result = train(task, _params(), config, device="cpu")
        assert result.status == "completed", result.reason
        assert result.precision == precision
        assert result.optimizer_steps == result.scheduler_steps == 4
        assert len(task.models[0].train_batch_sizes) == 4 * micro_batches
        expected = torch.bfloat16 if precision == "bf16" else None
        assert set(task.models[0].autocast_dtypes) == {expected}


# --- statuses: pruned, diverged, failed, interrupted ----------------------------------------


def test_report_true_prunes_after_that_epoch(store: Any) -> None:
    reports: list[tuple[int, float]] = []

    def report(epoch: int, metric: float) -> bool:
        reports.append((epoch, metric))
        return epoch == 2

    result = train(
        ToyTask(), _params(), TrainConfig(epochs=5), report=report, checkpoints=store, device="cpu"
    )
    assert result.status == "pruned"
    assert result.epochs_run == 2 and [e for e, _ in reports] == [1, 2]
    assert [m for _, m in reports] == result.metrics
    assert (
        store.load()["train_state"]["loop"]["metrics"] == result.metrics
    )  # saved before the report


def test_resume_from_an_epoch_end_reports_that_epoch_again(store: Any) -> None:
    config = TrainConfig(epochs=4)
    first = train(
        ToyTask(), _params(), config, checkpoints=store, report=lambda e, m: e == 2, device="cpu"
    )
    assert first.status == "pruned"
    reports: list[tuple[int, float]] = []
    second = train(
        ToyTask(),
        _params(),
        config,
        checkpoints=store,
        report=lambda e, m: reports.append((e, m)) or False,
        device="cpu",
    )
    assert second.status == "completed" and second.resumed_from == {"epoch": 2, "step": 0}
    assert reports[0] == (2, first.metrics[1])
    assert [e for e, _ in reports] == [2, 3, 4]
    assert second.metrics[:2] == first.metrics and second.epochs_run == 4
    # ...and a caller that prunes on the repeated report gets "pruned" without more training.
    third = train(
        ToyTask(),
        _params(),
        TrainConfig(epochs=4),
        checkpoints=store,
        report=lambda e, m: True,
        device="cpu",
    )
    assert third.status == "pruned" and third.epochs_run == 4


def test_resume_from_inside_an_epoch_reports_the_last_finished_epoch_again(store: Any) -> None:
    # Stopped in epoch 2, after epoch 1's report may not have reached the caller's storage.
    stop = threading.Event()
    reports: list[tuple[int, float]] = []
    first = train(
        ToyTask(),
        _params(),
        TrainConfig(epochs=3),
        checkpoints=store,
        stop=stop,
        report=lambda e, m: reports.append((e, m)) or False,
        progress=lambda e, s, n, loss: (e, s) == (2, 2) and stop.set(),
        device="cpu",
    )
    assert first.status == "preempted" and reports == [(1, first.metrics[0])]
    again: list[tuple[int, float]] = []
    second = train(
        ToyTask(),
        _params(),
        TrainConfig(epochs=3),
        checkpoints=store,
        report=lambda e, m: again.append((e, m)) or False,
        device="cpu",
    )
    assert second.resumed_from == {"epoch": 1, "step": 2}
    assert again == [(1, first.metrics[0]), (2, second.metrics[1]), (3, second.metrics[2])]


def test_nan_loss_stops_at_once_with_status_diverged() -> None:
    calls = {"n": 0}

    def loss_fn(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        calls["n"] += 1
        loss = torch.nn.functional.cross_entropy(outputs, targets)
        return loss * float("nan") if calls["n"] == 7 else loss  # step 3 of epoch 2

    result = train(ToyTask(loss_fn=loss_fn), _params(), TrainConfig(epochs=3), device="cpu")
    assert result.status == "diverged"
    assert result.reason == "loss is nan at epoch 2, step 3"
    assert result.traceback is None
    assert calls["n"] == 7 and result.epochs_run == 1


def test_a_huge_learning_rate_diverges_without_a_traceback() -> None:
    result = train(
        ToyTask(), _params(lr=1e12), TrainConfig(epochs=3, optimizer="sgd"), device="cpu"
    )
    assert result.status == "diverged"
    assert result.reason.startswith("loss is ")
    assert "nan" in result.reason or "inf" in result.reason


def test_an_error_in_the_task_fails_the_run_with_reason_and_traceback() -> None:
    def broken_loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        raise ValueError("labels out of range\nsecond line")

    result = train(ToyTask(loss_fn=broken_loss), _params(), TrainConfig(epochs=2), device="cpu")
    assert result.status == "failed"
    assert result.reason == "ValueError: labels out of range"
    assert "broken_loss" in result.traceback and "second line" in result.traceback


def test_a_factory_error_fails_the_run() -> None:
    def factory(params: dict[str, Any]) -> Any:
        raise KeyError("width")

    result = train(factory, {}, TrainConfig(epochs=1), device="cpu")
    assert result.status == "failed" and result.reason == "KeyError: 'width'"


def test_keyboard_interrupt_propagates_and_restores_the_sigterm_handler() -> None:
    def interrupted(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        raise KeyboardInterrupt

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        train(ToyTask(loss_fn=interrupted), _params(), TrainConfig(epochs=1), device="cpu")
    assert signal.getsignal(signal.SIGTERM) is before


# --- preemption and checkpoints --------------------------------------------------------------


@pytest.mark.slow
def test_sigterm_checkpoints_and_preempts_then_resume_is_exact(store: Any, tmp_path: Any) -> None:
    config = TrainConfig(epochs=3)
    whole_store = DirectoryCheckpointStore(tmp_path / "whole")
    whole = train(digits, DIGITS, config, checkpoints=whole_store, device="cpu")

    chained: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: chained.append(signum))
    try:

        def progress(epoch: int, step: int, steps: int, loss: float) -> None:
            if (epoch, step) == (2, 5):
                os.kill(os.getpid(), signal.SIGTERM)

        first = train(digits, DIGITS, config, checkpoints=store, progress=progress, device="cpu")
        handler_after = signal.getsignal(signal.SIGTERM)
    finally:
        worker_handler = signal.signal(signal.SIGTERM, previous)
    assert first.status == "preempted" and first.reason is None
    assert chained == [signal.SIGTERM]  # the worker's own handler still ran
    assert handler_after is worker_handler  # and was put back
    state = store.load()
    assert (state["train_state"]["loop"]["epoch"], state["train_state"]["loop"]["step"]) == (1, 5)
    assert state["train_state"]["data"]["order"] is not None and first.checkpoint_bytes > 0

    second = train(digits, DIGITS, config, checkpoints=store, device="cpu")
    assert second.status == "completed" and second.resumed_from == {"epoch": 1, "step": 5}
    assert second.metrics == whole.metrics
    assert_same_weights(weights(store), weights(whole_store))


class _StopInValidation(ToyTask):
    """ToyTask whose model sets `stop` at its `at`-th forward pass in validation (2 batches an
    epoch here): a preemption that arrives while the epoch is being validated."""

    def __init__(self, stop: threading.Event, at: int) -> None:
        super().__init__()
        self.stop, self.at, self.calls = stop, at, 0

    def __call__(self, params: dict[str, Any]) -> Any:
        task = super().__call__(params)
        model, forward = task.model, task.model.forward

        def counted(x: torch.Tensor) -> torch.Tensor:
            if not model.training:
                self.calls += 1
                if self.calls == self.at:
                    self.stop.set()
            return forward(x)

        model.forward = counted
        return task


def test_a_stop_in_validation_checkpoints_the_trained_epoch_and_resume_is_exact(
    store: Any, tmp_path: Any
) -> None:
    config = TrainConfig(epochs=3)
    whole_store = DirectoryCheckpointStore(tmp_path / "whole")
    whole = train(ToyTask(), _params(), config, checkpoints=whole_store, device="cpu")

    stop = threading.Event()
    task = _StopInValidation(stop, at=3)  # epoch 2's first validation batch
    reports: list[tuple[int, float]] = []
    first = train(
        task,
        _params(),
        config,
        checkpoints=store,
        stop=stop,
        report=lambda e, m: reports.append((e, m)) or False,
        device="cpu",
    )
    assert first.status == "preempted" and first.reason is None
    assert task.calls == 3  # validation stopped there: its second batch never ran
    assert first.metrics == whole.metrics[:1] and reports == [(1, whole.metrics[0])]
    loop = store.load()["train_state"]["loop"]
    assert (loop["epoch"], loop["step"]) == (1, 4)  # epoch 2's 4 steps done, not validated

    again: list[tuple[int, float]] = []
    second = train(
        _StopInValidation(threading.Event(), at=0),  # the same task, never stopped
        _params(),
        config,
        checkpoints=store,
        report=lambda e, m: again.append((e, m)) or False,
        device="cpu",
    )
    assert second.status == "completed" and second.resumed_from == {"epoch": 1, "step": 4}
    assert second.optimizer_steps == whole.optimizer_steps == 12
    assert second.metrics == whole.metrics and second.train_losses == whole.train_losses
    assert again == [(1, whole.metrics[0]), (2, whole.metrics[1]), (3, whole.metrics[2])]
    assert_same_weights(weights(store), weights(whole_store))


def test_a_stop_after_the_last_validation_batch_keeps_the_finished_validation(store: Any) -> None:
    stop = threading.Event()
    task = _StopInValidation(stop, at=2)  # epoch 1's last validation batch
    result = train(
        task, _params(), TrainConfig(epochs=3), checkpoints=store, stop=stop, device="cpu"
    )
    assert result.status == "preempted" and len(result.metrics) == 1  # epoch 1 validated
    loop = store.load()["train_state"]["loop"]
    assert (loop["epoch"], loop["step"]) == (1, 0)  # stopped before epoch 2's first step


def test_checkpoints_every_n_seconds_within_an_epoch(tmp_path: Any) -> None:
    writes: list[tuple[int, int]] = []

    class Recording(DirectoryCheckpointStore):
        def save(self, state: dict[str, Any]) -> int:
            writes.append(
                (state["train_state"]["loop"]["epoch"], state["train_state"]["loop"]["step"])
            )
            return super().save(state)

    result = train(
        ToyTask(),
        _params(),
        TrainConfig(epochs=2, checkpoint_every_s=1e-9),
        checkpoints=Recording(tmp_path),
        device="cpu",
    )
    assert result.status == "completed"
    # Before every step (4 steps an epoch) once the interval has passed, and at each epoch end.
    assert writes == [
        (0, 0),
        (0, 1),
        (0, 2),
        (0, 3),
        (1, 0),
        (1, 0),
        (1, 1),
        (1, 2),
        (1, 3),
        (2, 0),
    ]


def test_a_failing_checkpoint_store_is_logged_and_training_goes_on(
    tmp_path: Any, caplog: Any
) -> None:
    class Flaky(DirectoryCheckpointStore):
        calls = 0

        def write(self, data: Any) -> None:
            Flaky.calls += 1
            if Flaky.calls % 2:
                raise ConnectionError("store unreachable")
            super().write(data)

    with caplog.at_level(logging.WARNING, logger="trainer"):
        result = train(
            ToyTask(), _params(), TrainConfig(epochs=3), checkpoints=Flaky(tmp_path), device="cpu"
        )
    assert result.status == "completed" and result.epochs_run == 3
    assert "checkpoint at epoch 1 step 0 not saved (ConnectionError: store unreachable)" in (
        caplog.text
    )
    assert Flaky(tmp_path).load()["train_state"]["loop"]["epoch"] == 2  # the second write succeeded


def test_a_checkpoint_of_another_run_is_ignored(store: Any, caplog: Any) -> None:
    train(ToyTask(), _params(lr=0.01), TrainConfig(epochs=2), checkpoints=store, device="cpu")
    with caplog.at_level(logging.WARNING, logger="trainer"):
        other = train(
            ToyTask(), _params(lr=0.02), TrainConfig(epochs=2), checkpoints=store, device="cpu"
        )
    assert other.resumed_from is None and other.epochs_run == 2
    assert "holds a checkpoint of another run" in caplog.text
    # The checkpoint now belongs to the new run, which resumes from it.
    again = train(
        ToyTask(), _params(lr=0.02), TrainConfig(epochs=2), checkpoints=store, device="cpu"
    )
    assert again.resumed_from == {"epoch": 2, "step": 0} and again.metrics == other.metrics


def test_a_checkpoint_in_the_old_layout_restarts_the_trial_with_one_line(
    store: Any, caplog: Any
) -> None:
    first = train(ToyTask(), _params(), TrainConfig(epochs=2), checkpoints=store)
    state = store.load()
    # Format 1: the loop state as one flat dict beside "data" and "rng" (before TrainState).
    loop_state = state["train_state"]
    old = {**state, "format": 1, "data": loop_state["data"], "rng": loop_state["rng"]}
    old["train_state"] = {**loop_state["loop"], **loop_state["memory"]}
    store.save(old)
    with caplog.at_level(logging.WARNING, logger="trainer"):
        again = train(ToyTask(), _params(), TrainConfig(epochs=2), checkpoints=store)
    assert again.status == "completed" and again.resumed_from is None
    assert again.metrics == first.metrics  # trained from its start, the same run
    lines = [r.getMessage() for r in caplog.records if "older layout" in r.getMessage()]
    assert len(lines) == 1 and "format 1" in lines[0] and "restarting" in lines[0]


def test_train_state_round_trips_through_a_weights_only_checkpoint(store: Any) -> None:
    train(ToyTask(), _params(), TrainConfig(epochs=1), checkpoints=store)
    raw = store.load()["train_state"]  # loaded with weights_only=True
    state = TrainState.from_state_dict(raw)
    assert (state.epoch, state.step, state.optimizer_steps) == (1, 0, state.optimizer_steps)
    assert state.optimizer_steps > 0 and len(state.metrics) == 1 and state.rng is not None
    assert TrainState.from_state_dict(state.state_dict()) == state


def test_preempted_without_a_store_says_progress_is_lost() -> None:
    stop = threading.Event()
    stop.set()
    result = train(ToyTask(), _params(), TrainConfig(epochs=2), stop=stop, device="cpu")
    assert result.status == "preempted" and "progress is lost" in result.reason


# --- out-of-memory fitting -------------------------------------------------------------------


def test_out_of_memory_turns_on_checkpointing_then_halves_the_micro_batch(store: Any) -> None:
    limit = {"batch": 32}
    uninterrupted = train(ToyTask(), _params(), TrainConfig(epochs=3), device="cpu")

    def report(epoch: int, metric: float) -> bool:
        limit["batch"] = 8  # memory shrinks after epoch 1 (another process took some)
        return False

    task = ToyTask(oom_above=limit)
    result = train(
        task, _params(), TrainConfig(epochs=3), checkpoints=store, report=report, device="cpu"
    )
    assert result.status == "completed", result.reason
    assert len(result.adapted) == 3
    assert "gradient checkpointing turned on" in result.adapted[0]
    assert "micro-batch 32 -> 16, grad_accum_steps 1 -> 2" in result.adapted[1]
    assert "micro-batch 16 -> 8, grad_accum_steps 2 -> 4" in result.adapted[2]
    assert "effective batch 32 unchanged" in result.adapted[2]
    assert result.grad_accum_steps == 4 and result.grad_checkpointing
    assert result.resumed_from == {"epoch": 1, "step": 0}  # from epoch 1's checkpoint
    assert result.optimizer_steps == 12 and result.epochs_run == 3
    assert result.metrics == pytest.approx(uninterrupted.metrics)  # the same maths
    assert store.load()["train_state"]["memory"]["adapted"] == result.adapted
    # A later resume (another process, another machine) keeps the adapted fitting.
    again = train(
        ToyTask(oom_above=limit), _params(), TrainConfig(epochs=3), checkpoints=store, device="cpu"
    )
    assert again.grad_accum_steps == 4 and again.adapted == result.adapted


def test_out_of_memory_that_checkpointing_fixes_keeps_the_micro_batch() -> None:
    task = ToyTask(oom_above={"batch": 16, "checkpointing": True})
    result = train(task, _params(), TrainConfig(epochs=2), device="cpu")
    assert result.status == "completed" and result.resumed_from is None  # restarted: no store
    assert result.adapted == [
        "out of memory at micro-batch 32 (CUDA out of memory. Tried to allocate 32 samples' "
        "activations): gradient checkpointing turned on"
    ]
    assert result.grad_accum_steps == 1 and result.grad_checkpointing
    assert task.models[-1].grad_checkpointing and len(task.models) == 2


def test_out_of_memory_at_micro_batch_one_fails_with_a_clear_reason() -> None:
    result = train(
        ToyTask(oom_above={"batch": 0}), _params(batch_size=4), TrainConfig(epochs=1), device="cpu"
    )
    assert result.status == "failed"
    assert result.reason.startswith("out of memory at micro-batch 1 (batch_size 4, ")
    assert len(result.adapted) == 3  # checkpointing, then 4 -> 2 -> 1
