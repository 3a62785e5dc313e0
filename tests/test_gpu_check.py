"""bench/gpu/check.py on a machine without a GPU: its CPU parts pass, it says what needs a
GPU, and it exits 0."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch

from tests.helpers import REPO

pytestmark = pytest.mark.slow


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU machine it runs the GPU checks")
def test_gpu_check_runs_its_cpu_parts_and_says_it_needs_a_gpu() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "bench.gpu.check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert "deterministic resume cpu -> cpu" in run.stdout and "identical  [ok]" in run.stdout
    assert "['2', '3']  [ok]" in run.stdout
    assert re.search(
        r"sharded \(fsdp\) step, 2 x CPU, gloo, fp32 +as estimated  \[ok\]", run.stdout
    )
    assert "This machine has no CUDA GPU: the GPU checks need one" in run.stdout
    assert "[FAIL]" not in run.stdout
