"""What `hpsearch run` says when Ctrl-C stops it: every trial that exists is counted, the same
command continues the study, and the leading paused trial is named beside the best one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from tests.helpers import REPO

STUDY = """
[study]
name = "stopped"
direction = "maximize"
metric = "val_accuracy"
budget_epochs = 100000
sampler = "random"
seed = 1

[pruner]
type = "asha"
min_resource = 1
reduction_factor = 3

[task]
name = "tests.helpers.tiny_task:make_task"
epochs = 9

[space]
lr = { type = "float", low = 1e-4, high = 3e-1, log = true }
"""


@pytest.mark.slow
def test_ctrl_c_summary_counts_every_trial_and_says_how_to_continue(tmp_path: Path) -> None:
    (tmp_path / "study.toml").write_text(STUDY)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HPSEARCH_")}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.Popen(
        [sys.executable, "-m", "search", "run", "study.toml"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"sqlite:///{tmp_path / 'hpsearch.db'}"
    deadline = time.monotonic() + 240
    try:
        while True:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no trial paused within 240 s"
            time.sleep(0.5)
            try:
                trials = optuna.load_study(study_name="stopped", storage=url).trials
            except Exception:  # not created yet
                continue
            if sum(t.state.name == "WAITING" and bool(t.intermediate_values) for t in trials) >= 3:
                break  # paused at a rung (promotion-based ASHA keeps them WAITING)
        proc.send_signal(signal.SIGINT)  # what the terminal's Ctrl-C sends
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err[-3000:]
    trials = optuna.load_study(study_name="stopped", storage=url).trials
    head, continue_line, *rest = out.splitlines()
    assert head.startswith(f"study 'stopped' stopped: {len(trials)} trials so far ("), out
    assert continue_line == (
        "  continue: run the same command again (or hpsearch worker --study stopped)"
    )
    assert any(line.startswith("  leading paused: trial ") for line in rest), out
