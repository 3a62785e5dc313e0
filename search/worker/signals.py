"""SIGTERM (a spot instance's notice) and Ctrl-C: checkpoint the running trial at its next step,
hand it back to the queue as resumable, and exit (0 for SIGTERM, 130 for Ctrl-C). A second Ctrl-C
exits at once; the trial is then handed back by the reaper after the grace period.

    signals = StopSignals(on_stop=health.stop_all)
    restore = signals.install()
    ...
    restore(); exit_code = signals.exit_code
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["StopSignals"]

logger = logging.getLogger("search.worker.signals")


class StopSignals:
    """The worker's handlers of SIGTERM and SIGINT (in the main thread only)."""

    def __init__(self, on_stop: Callable[[], None]) -> None:
        self._on_stop = on_stop
        self.received: int | None = None

    @property
    def reason(self) -> str:
        """Why the worker leaves early, for its row in the workers table."""
        return "SIGTERM" if self.received == signal.SIGTERM else "interrupted"

    @property
    def exit_code(self) -> int:
        return 130 if self.received == signal.SIGINT else 0

    def install(self) -> Callable[[], None]:
        """Handle the signals; returns the function that puts the previous handlers back."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
        for s in previous:
            signal.signal(s, self._on_signal)

        def restore() -> None:
            for s, handler in previous.items():
                signal.signal(s, handler)

        return restore

    def _on_signal(self, signum: int, _frame: Any) -> None:
        if signum == signal.SIGINT and self.received == signal.SIGINT:
            raise KeyboardInterrupt  # second Ctrl-C: stop now
        self.received = signum
        name = "SIGTERM" if signum == signal.SIGTERM else "Ctrl-C"
        logger.warning("%s: checkpointing the running trial and handing it back", name)
        self._on_stop()
