"""`hpsearch status --watch` on a pseudo-terminal and on a pipe, with a trial really held by a
registered worker (its lease, heartbeat and reported epochs in the database)."""

from __future__ import annotations

import fcntl
import os
import pty
import queue
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from search.db import fenced_writes
from search.db.leases import Claim
from search.db.storage import Storage, open_storage
from search.study.studies import create_study
from tests.helpers.cli import cli_env, hpsearch
from tests.helpers.configs import make_config
from tests.helpers.dispatch import claim_a_new_trial, register
from tests.helpers.processes import default_signals, ignore_sigint
from tests.helpers.terminal import sized_by_the_terminal


def held_trial(url: str, name: str, n_trials: int = 3) -> tuple[Storage, Claim]:
    """A study whose trial 0 is held by the worker `worker_of(name)`, at epoch 2, score 0.5."""
    storage = open_storage(url)
    study, _ = create_study(storage, make_config(name, n_trials=n_trials))
    register(storage, study.study_id, worker_of(name), grace_s=60)
    claim = claim_a_new_trial(storage, study.study_id, worker_of(name))
    fenced_writes.report(storage, claim, {1: 0.25, 2: 0.5})
    return storage, claim


def worker_of(study_name: str) -> str:
    return f"w-{study_name[-6:]}"


class OnATerminal:
    """A command whose stdout is a pseudo-terminal of 30 x 120; what it drew is kept."""

    def __init__(
        self, argv: list[str], cwd: Path, preexec_fn: Callable[[], None] = default_signals
    ) -> None:
        self.primary, secondary = pty.openpty()
        fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 120, 0, 0))
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=sized_by_the_terminal(cli_env()),
            stdout=secondary,
            stderr=subprocess.PIPE,
            preexec_fn=preexec_fn,  # the test signals it: dispositions set, not inherited
        )
        os.close(secondary)
        self.text = ""

    def read_until(self, condition: Callable[[str], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not condition(self.text):
            left = deadline - time.monotonic()
            assert left > 0, f"not shown in {timeout} s:\n{self.text[-3000:]!r}"
            ready, _, _ = select.select([self.primary], [], [], min(left, 0.5))
            if ready:
                try:
                    self.text += os.read(self.primary, 65536).decode(errors="replace")
                except OSError:  # the command closed the terminal
                    assert condition(self.text), self.text[-3000:]
                    return

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.primary)


def test_watch_redraws_in_place_on_a_terminal_and_ctrl_c_exits_0(
    pg_url: str, study_name: str, tmp_path: Path
) -> None:
    storage, claim = held_trial(pg_url, study_name)
    argv = [sys.executable, "-m", "search", "status", "--study", study_name]
    terminal = OnATerminal([*argv, "--storage", pg_url, "--watch", "--interval", "0.3"], tmp_path)
    try:
        running = rf"\s+0\s+2\s+0\.5\s+\d+s ago\s+{worker_of(study_name)} \(h, cpu\)"
        terminal.read_until(lambda text: re.search(running, text) is not None, 60)
        assert f"study {study_name}: 0/3 finished (val_accuracy, maximize)" in terminal.text
        assert "running 1" in terminal.text and "best so far: none yet" in terminal.text

        # The worker reports epoch 3: the same table is redrawn over itself, not appended.
        fenced_writes.report(storage, claim, {3: 0.75})
        terminal.read_until(lambda text: re.search(r"\s+0\s+3\s+0\.75\s+", text) is not None, 30)
        assert re.search(r"\x1b\[\d+F", terminal.text), "the cursor never went back up"
        assert "\x1b[J" in terminal.text

        terminal.proc.send_signal(signal.SIGINT)  # what the terminal's Ctrl-C sends
        assert terminal.proc.wait(timeout=30) == 0
        terminal.read_until(lambda text: "stopped" in text, 10)
        assert b"Traceback" not in terminal.proc.stderr.read()
    finally:
        terminal.close()
        storage.close()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_watch_stops_on_ctrl_c_and_sigterm_even_started_in_the_background(
    signum: int, pg_url: str, study_name: str, tmp_path: Path
) -> None:
    """Started with SIGINT ignored (as a non-interactive shell's background job is), `--watch`
    still stops on SIGINT, and on SIGTERM, with exit 0."""
    storage, _claim = held_trial(pg_url, study_name)
    argv = [sys.executable, "-m", "search", "status", "--study", study_name, "--storage", pg_url]
    terminal = OnATerminal([*argv, "--watch", "--interval", "0.3"], tmp_path, ignore_sigint)
    try:
        terminal.read_until(lambda text: "running 1" in text, 60)
        terminal.proc.send_signal(signum)
        assert terminal.proc.wait(timeout=30) == 0
        assert b"Traceback" not in terminal.proc.stderr.read()
    finally:
        terminal.close()
        storage.close()


@pytest.mark.slow
def test_watch_prints_plain_lines_elsewhere_and_ends_with_the_study(
    pg_url: str, study_name: str, tmp_path: Path
) -> None:
    storage, claim = held_trial(pg_url, study_name, n_trials=1)
    argv = [sys.executable, "-m", "search", "status", "--study", study_name, "--storage", pg_url]
    err_file = tmp_path / "stderr.txt"
    with err_file.open("w") as err_out:
        proc = subprocess.Popen(
            [*argv, "--watch", "--interval", "0.3"],
            cwd=tmp_path,
            env=cli_env(),
            stdout=subprocess.PIPE,
            stderr=err_out,
            text=True,
            preexec_fn=default_signals,
        )
    lines_read: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(
        target=lambda: [lines_read.put(line) for line in proc.stdout], daemon=True
    )
    reader.start()
    try:
        # The first block, however long the start took, then a few refreshes with nothing new:
        # one block, not one per refresh.
        first = lines_read.get(timeout=60)
        assert "0/1 finished" in first, first
        time.sleep(2)
        fenced_writes.finish(storage, claim, "COMPLETE", 0.9, {}, intermediate={3: 0.9})
        proc.wait(timeout=60)
        reader.join(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        storage.close()
    out = first + "".join(lines_read.queue)
    err = err_file.read_text()
    assert proc.returncode == 0, err
    assert "\x1b" not in out
    lines = out.splitlines()
    assert all(re.match(r"\d\d:\d\d:\d\d ", line) for line in lines), out
    assert sum("0/1 finished" in line for line in lines) == 1, out
    assert re.search(rf"\s+0\s+2\s+0\.5\s+\d+s ago\s+{worker_of(study_name)}", out)
    assert "1/1 finished" in out and "best so far: trial 0  val_accuracy 0.9" in out
    assert lines[-1].endswith("study finished")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--watch", "--interval", "0"], "--interval: must be between 0.1 and 3600"),
        (["--watch", "--interval", "soon"], "--interval: not a number of seconds"),
        (["--watch", "--json"], "--watch and --json: choose one"),
        (["--interval", "2"], "--interval is for --watch"),
    ],
)
def test_watch_bad_input(args: list[str], message: str, pg_url: str, tmp_path: Path) -> None:
    done = hpsearch("status", "--study", "any", "--storage", pg_url, *args, cwd=tmp_path)
    assert done.returncode == 2
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1
