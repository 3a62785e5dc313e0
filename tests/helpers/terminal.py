"""Running a command on a pseudo-terminal, the way a user sees its live output."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import termios
from collections.abc import Sequence
from pathlib import Path


def sized_by_the_terminal(env: dict[str, str] | None) -> dict[str, str]:
    """`env` (default: this process's) without COLUMNS and LINES, which Python's
    `shutil.get_terminal_size` reads before the terminal's own size: a developer's shell that
    exports them (or pytest-xdist's workers) would otherwise decide the width a test sees."""
    return {
        k: v
        for k, v in (os.environ if env is None else env).items()
        if k not in ("COLUMNS", "LINES")
    }


def run_on_a_terminal(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: dict[str, str] | None = None,
    stream: str = "stderr",
    columns: int = 160,
    timeout: float = 300,
) -> tuple[int, str]:
    """Run `argv` with `stream` (stdout or stderr) on a terminal of 30 rows and `columns`
    columns (tqdm draws nothing on a zero-column one); returns (exit code, what it showed)."""
    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 30, columns, 0, 0))
    streams = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, stream: secondary}
    process = subprocess.Popen(argv, cwd=cwd, env=sized_by_the_terminal(env), **streams)
    os.close(secondary)
    output = b""
    while True:
        try:
            chunk = os.read(primary, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        output += chunk
    os.close(primary)
    return process.wait(timeout=timeout), output.decode(errors="replace")
