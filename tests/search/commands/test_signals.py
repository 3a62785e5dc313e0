"""Signals and pipes at the edges of a process's life: SIGTERM while a worker is still
starting (importing torch), and a reader that closes the pipe early."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from search.db.storage import open_storage
from search.study.studies import create_study
from tests.helpers.cli import cli_env
from tests.helpers.configs import make_config
from tests.helpers.dispatch import register
from tests.helpers.processes import default_signals


def _env(url: str) -> dict[str, str]:
    return {**cli_env(), "HPSEARCH_STORAGE": url}


def test_sigterm_while_a_worker_starts_exits_0_at_once(
    pg_url: str, study_name: str, tmp_path: Path
) -> None:
    """Before it holds a trial a worker has nothing to hand back: SIGTERM, even while it is
    still importing torch, means exit 0 at once, as it does after a hand-back."""
    create_study(open_storage(pg_url), make_config(study_name, n_trials=2))
    proc = subprocess.Popen(
        [sys.executable, "-m", "search", "worker", "--study", study_name, "--device", "cpu"],
        cwd=tmp_path,
        env=_env(pg_url),
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_signals,
    )
    time.sleep(0.5)  # the interpreter is up; the imports (torch, optuna) take seconds more
    assert proc.poll() is None
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert time.monotonic() - sent < 2.0
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        "hpsearch: SIGTERM before this worker held a trial: exiting (exit 0)"
    )


def test_a_reader_that_closes_the_pipe_early_gets_no_traceback(
    pg_url: str, study_name: str, tmp_path: Path
) -> None:
    """`hpsearch workers --all | head -1`: the rest of the output has nowhere to go."""
    storage = open_storage(pg_url)
    ref, _ = create_study(storage, make_config(study_name, n_trials=1))
    for i in range(400):  # more lines than a pipe holds
        register(storage, ref.study_id, f"{study_name[-20:]}-{i}", grace_s=60)
    pipeline = subprocess.run(
        f"'{sys.executable}' -m search workers --all --study '{study_name}' | head -1; "
        'echo "exit ${PIPESTATUS[0]}" >&2',
        shell=True,
        executable="/bin/bash",
        cwd=tmp_path,
        env=_env(pg_url),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert pipeline.stdout.startswith("state"), pipeline.stdout
    assert "Traceback" not in pipeline.stderr and "BrokenPipe" not in pipeline.stderr
    assert pipeline.stderr.strip().splitlines()[-1] == "exit 0", pipeline.stderr
