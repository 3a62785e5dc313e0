"""Ctrl-C and SIGTERM stop the long-running views (`hpsearch dashboard`, `status --watch`).

Both signals are handled here rather than left to Python's defaults: a process started in the
background by a non-interactive shell inherits SIGINT *ignored*, and SIGTERM's default kills it
without a word (143). Inside `stop_on_signals()` either raises KeyboardInterrupt in the main
thread, which the view turns into a clean stop and exit 0.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

__all__ = ["stop_on_signals"]


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise KeyboardInterrupt while inside; the old handlers after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(_signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
