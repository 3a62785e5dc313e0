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
    process = subprocess.Popen(argv, cwd=cwd, env=env, **streams)
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
