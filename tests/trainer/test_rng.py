"""RNG state in checkpoints: the CUDA generator of the device used, restored on any index."""

from __future__ import annotations

import random

import numpy as np
import torch

from trainer.rng import rng_state, set_rng_state


class FakeCuda:
    """A machine with `count` GPUs: one generator state (a byte tensor) per device index."""

    def __init__(self, count: int) -> None:
        self.states = [torch.full((16,), 100 + i, dtype=torch.uint8) for i in range(count)]
        self.reads: list[int] = []

    def device_count(self) -> int:
        return len(self.states)

    def get_rng_state(self, device: torch.device) -> torch.Tensor:
        self.reads.append(device.index)
        return self.states[device.index].clone()

    def set_rng_state(self, new_state: torch.Tensor, device: torch.device) -> None:
        self.states[device.index] = new_state.clone()


def test_a_gpus_all_child_checkpoint_resumes_on_cuda_3_of_eight() -> None:
    child = FakeCuda(1)  # a --gpus all child sees one GPU, as cuda:0
    child.states[0] = torch.arange(16, dtype=torch.uint8)  # its generator has advanced
    saved = rng_state(torch.device("cuda", 0), cuda=child)
    assert child.reads == [0]  # only the device it trains on, not every visible one

    machine = FakeCuda(8)
    before = [s.clone() for s in machine.states]
    note = set_rng_state(saved, torch.device("cuda", 3), cuda=machine)
    assert note is None
    assert torch.equal(machine.states[3], torch.arange(16, dtype=torch.uint8))
    assert all(torch.equal(machine.states[i], before[i]) for i in range(8) if i != 3)


def test_python_numpy_and_torch_generators_are_restored() -> None:
    saved = rng_state(torch.device("cpu"))
    expected = (random.random(), np.random.rand(), torch.rand(3))
    random.random(), np.random.rand(), torch.rand(3)  # the generators move on
    assert set_rng_state(saved, torch.device("cpu")) is None
    again = (random.random(), np.random.rand(), torch.rand(3))
    assert again[:2] == expected[:2] and torch.equal(again[2], expected[2])


def test_a_cpu_checkpoint_resumed_on_a_gpu_says_the_cuda_state_is_not_restored() -> None:
    saved = rng_state(torch.device("cpu"))
    assert saved["cuda_device"] is None
    machine = FakeCuda(2)
    before = [s.clone() for s in machine.states]
    note = set_rng_state(saved, torch.device("cuda", 1), cuda=machine)
    assert note is not None and "no CUDA generator state for cuda:1" in note
    assert "dropout" in note and "\n" not in note
    assert all(torch.equal(a, b) for a, b in zip(machine.states, before, strict=True))
