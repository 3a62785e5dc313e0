"""What `hpsearch run` says when Ctrl-C stops it: every trial that exists is counted, the same
command continues the study, and the leading paused trial is named beside the best one."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from tests.helpers.cli import cli_env

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
    env = cli_env()
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


TINY_BUDGET = """
[study]
name = "{name}"
budget_epochs = 6
sampler = "random"

[pruner]
type = "none"

[task]
name = "tests.helpers.tiny_task:make_task"
epochs = 3

[space]
lr = {{ type = "float", low = 1e-4, high = 3e-1, log = true }}
"""


def test_run_summary_with_hpsearch_storage_names_next_commands_without_flags(
    pg_url: str, study_name: str, tmp_path: Path
) -> None:
    """$HPSEARCH_STORAGE names the database: the "next:" commands need no --storage (they read
    it too), and the checkpoints are said to be in the database (once)."""
    (tmp_path / "study.toml").write_text(TINY_BUDGET.format(name=study_name))
    env = {**cli_env(), "HPSEARCH_STORAGE": pg_url}
    done = subprocess.run(
        [sys.executable, "-m", "search", "run", "study.toml"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert f"study '{study_name}' finished: " in out
    assert "--storage" not in out and "in in " not in out
    assert "and reports, in the database;" in out
    assert f"next: hpsearch trials --study {study_name} (every trial)" in out
