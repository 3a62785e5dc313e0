"""The one live status line every progress display draws (the worker's, `run`'s, `compare`'s),
and how a parameter's value is printed.

On a terminal the line is redrawn in place (``\\r`` and erase-line); elsewhere (a log file, CI)
it is printed as a plain line, and only when its text changed, unless `plain` is off (then
nothing is printed there: a worker's log has its own lines).
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

__all__ = ["OncePerProcess", "StatusLine", "TerminalLogHandler", "format_value"]


_drawn: StatusLine | None = None
"""The status line this process has on the terminal now (`TerminalLogHandler` redraws it)."""


class StatusLine:
    """A line of status on `out` (default: stderr), redrawn in place on a terminal."""

    def __init__(self, out: TextIO | None = None, *, plain: bool = True) -> None:
        self.out = out or sys.stderr
        self.tty = self.out.isatty()
        self.plain = plain
        self._last: str | None = None

    def show(self, text: str) -> None:
        """Draw `text` (on a terminal, in place of the line drawn before)."""
        global _drawn
        if self.tty:
            self.out.write(f"\r\033[K{text}")
            _drawn = self
        elif self.plain and text != self._last:
            self.out.write(text + "\n")
        else:
            return
        self._last = text
        self.out.flush()

    def clear(self) -> None:
        """Erase the line (on a terminal), so that a log line can be written in its place."""
        global _drawn
        if self.tty:
            self.out.write("\r\033[K")
            self.out.flush()
            if _drawn is self:
                _drawn = None

    def keep(self) -> None:
        """Leave the line drawn last on the screen and go on below it."""
        global _drawn
        if self.tty and self._last is not None:
            self.out.write("\n")
            self.out.flush()
        if _drawn is self:
            _drawn = None


def format_value(value: Any) -> str:
    """A parameter's or a metric's value as printed: floats to 4 significant digits, None "-"."""
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value)


class TerminalLogHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Log lines that never run into a status line: on a terminal each record first erases
    the line the cursor is on (this process's status line, or another process's on the same
    terminal), and this process's status line is drawn again below it."""

    def emit(self, record: logging.LogRecord) -> None:
        tty = getattr(self, "_tty", None)
        if tty is None:
            tty = self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        if not tty:
            super().emit(record)
            return
        try:
            self.stream.write("\r\033[K")
            super().emit(record)
            line = _drawn
            if line is not None and line.out is self.stream and line._last is not None:
                self.stream.write(f"\r\033[K{line._last}")
                self.stream.flush()
        except Exception:
            self.handleError(record)


class OncePerProcess(logging.Filter):
    """Lets a message that starts with one of `prefixes` through once per process and text:
    the precision line a worker's every trial logs says the same thing each time."""

    def __init__(self, *prefixes: str) -> None:
        super().__init__()
        self.prefixes = prefixes
        self.seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not message.startswith(self.prefixes):
            return True
        if message in self.seen:
            return False
        self.seen.add(message)
        return True
