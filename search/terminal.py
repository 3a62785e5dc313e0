"""The one live status line every progress display draws (the worker's, `run`'s, `compare`'s),
and how a parameter's value is printed.

On a terminal the line is redrawn in place (``\\r`` and erase-line); elsewhere (a log file, CI)
it is printed as a plain line, and only when its text changed, unless `plain` is off (then
nothing is printed there: a worker's log has its own lines).
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

__all__ = ["StatusLine", "format_value"]


class StatusLine:
    """A line of status on `out` (default: stderr), redrawn in place on a terminal."""

    def __init__(self, out: TextIO | None = None, *, plain: bool = True) -> None:
        self.out = out or sys.stderr
        self.tty = self.out.isatty()
        self.plain = plain
        self._last: str | None = None

    def show(self, text: str) -> None:
        """Draw `text` (on a terminal, in place of the line drawn before)."""
        if self.tty:
            self.out.write(f"\r\033[K{text}")
        elif self.plain and text != self._last:
            self.out.write(text + "\n")
        else:
            return
        self._last = text
        self.out.flush()

    def clear(self) -> None:
        """Erase the line (on a terminal), so that a log line can be written in its place."""
        if self.tty:
            self.out.write("\r\033[K")
            self.out.flush()

    def keep(self) -> None:
        """Leave the line drawn last on the screen and go on below it."""
        if self.tty and self._last is not None:
            self.out.write("\n")
            self.out.flush()


def format_value(value: Any) -> str:
    """A parameter's or a metric's value as printed: floats to 4 significant digits, None "-"."""
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value)
