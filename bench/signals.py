"""How a harness stops on `kill` (SIGTERM, SIGHUP) and Ctrl-C (SIGINT): through its `finally`s
and exit handlers, which stop the processes it started, and knowing which studies were cut
short.

By default SIGTERM and SIGHUP end a Python process alone, leaving its pool's processes behind
(training their study, then waiting for the next one for ever), and Ctrl-C raises wherever the
main thread is, with a traceback. `RunSignals` makes each of them exit through `SystemExit(128
+ signal)`.

A harness may also run a study in its own process whose `Worker` holds SIGTERM and SIGINT
while it runs (`python -m bench.efficiency --jobs 1`, `bench.systems.real_path`): the Worker
takes them as a spot machine's notice or a user's Ctrl-C, hands its trial back and ends the
study early, returning as if the study were done (SIGTERM) or failing with exit code 130.
Python writes every signal it handles to the wakeup fd, whichever handler runs, so `check()`
after a study says whether it was cut short: such a study is neither cached nor reported.

    signals = RunSignals(first=kill_my_workers)
    try:
        for study in studies:
            result = run(study)
            if signals.check() is not None:
                ...  # cut short: leave it out and stop
    finally:
        signals.close()

A harness killed with SIGKILL runs no handler: its pool's processes train their studies to the
end (a study's seconds or, on a clock of several workers, minutes) and then fail to hand the
result back, with a traceback each. `exit_with_parent`, run first in each of them (a pool's
initializer), ends them within seconds of the harness, quietly.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["RunSignals", "exit_with_parent"]

_STOPPING = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


class RunSignals:
    """The stopping signals this process received while it ran studies, whoever handled them;
    each ends the process through `SystemExit(128 + signal)` unless a Worker's handler holds
    it. `first` runs before that (processes to kill before unwinding removes their files)."""

    def __init__(self, first: Callable[[], None] | None = None) -> None:
        self._read = self._previous = -1
        self._handlers: dict[int, Any] = {}
        self.received: int | None = None
        if threading.current_thread() is not threading.main_thread():
            return  # called from a thread (not the command): the caller's signals

        def exit_now(signum: int, _frame: Any) -> None:
            if first is not None:
                first()
            sys.exit(128 + signum)

        self._handlers = {signum: signal.signal(signum, exit_now) for signum in _STOPPING}
        self._read, write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(write, False)
        self._previous = signal.set_wakeup_fd(write)

    def check(self) -> int | None:
        """The first stopping signal received so far, if any."""
        if self._read < 0:
            return None
        with contextlib.suppress(BlockingIOError):
            while data := os.read(self._read, 512):
                for signum in data:
                    if signum in _STOPPING and self.received is None:
                        self.received = signum
        return self.received

    def stopped(self, harness: str, what: str) -> None:
        """If a stopping signal came: say so in one line (`harness: stopped by SIGINT: what`)
        and exit with 128 + the signal."""
        signum = self.check()
        if signum is not None:
            print(f"{harness}: stopped by {signal.Signals(signum).name}: {what}", file=sys.stderr)
            raise SystemExit(128 + signum)

    def close(self) -> None:
        """The signals' handlers and wakeup fd as they were before (the harness may have been
        called from a program with its own)."""
        if self._read >= 0:
            os.close(signal.set_wakeup_fd(self._previous))
            os.close(self._read)
            self._read = -1
            for signum, handler in self._handlers.items():
                signal.signal(signum, handler)


def exit_with_parent(grace_s: float = 10.0, every_s: float = 1.0) -> threading.Event:
    """In a pool's process: once its parent process has ended (killed with SIGKILL too: the
    process is then another's child), send this process SIGTERM (a Worker inside hands its
    trial back), and end it `grace_s` seconds later if it is still there. Looks every
    `every_s` seconds from a daemon thread. What it writes to stderr from then on is dropped:
    the harness is gone, and its last words would be a traceback of the result it could not
    send. (Not the parent's sentinel pipe: a process forked after this one holds its write
    end, so it closes only when they all have ended.)

    Returns the event set when the parent has gone: a process that would wait for its next
    task from the parent ends at once when it is set, instead of at the end of the grace."""
    parent = os.getppid()
    gone = threading.Event()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every_s)
        gone.set()
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(grace_s)
        os._exit(128 + signal.SIGTERM)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()
    return gone
