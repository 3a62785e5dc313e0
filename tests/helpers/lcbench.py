"""YAHPO's LCBench surrogate for the benchmark's tests: `DATA`, where its data is, and
`needs_data`, the mark that skips a test without it (or without yahpo_gym)."""

from __future__ import annotations

import importlib.util

import pytest

from bench.efficiency.lcbench import default_data_dir

DATA = default_data_dir()
needs_data = pytest.mark.skipif(
    importlib.util.find_spec("yahpo_gym") is None
    or not (DATA / "lcbench" / "model.onnx").is_file(),
    reason=f"needs pip install -e '.[bench]' and YAHPO's LCBench data in {DATA} (or $YAHPO_DATA)",
)
