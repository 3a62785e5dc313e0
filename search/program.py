"""The `hpsearch` program: the first lines that run, before the command line's heavy imports.

A worker that a scheduler stops (SIGTERM) before it holds a trial has nothing to hand back, so
it exits 0 at once, as it does later after handing its trial back: importing torch takes
seconds, and without a handler of its own the process would die of the signal (143) there.
The handlers installed here stay until the worker installs its own (`search.worker.loop`) or
the launcher of several workers forwards the signal to its children. Ctrl-C during the imports
exits 130 without a traceback.

A reader that closes the pipe early (`hpsearch workers --all | head -1`) ends the program
quietly, exit 0: what it wanted was printed.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

__all__ = ["entry_point"]

WORKER_COMMANDS = ("worker", "run")
"""Commands that become workers: SIGTERM before they hold a trial exits 0 at once."""


def entry_point() -> None:
    """`hpsearch`, and `python -m search`."""
    command = next((a for a in sys.argv[1:] if not a.startswith("-")), None)
    if command in WORKER_COMMANDS:
        signal.signal(signal.SIGTERM, _leave_while_starting)
    # A background job of a non-interactive shell inherits SIGINT ignored: it stays ignored.
    interruptible = signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
    if interruptible:
        signal.signal(signal.SIGINT, _leave_while_starting)
    from search.commands.cli import entry_point as run_command  # torch, optuna, sqlalchemy

    if interruptible:  # from here on Ctrl-C is the commands' (KeyboardInterrupt, or their own)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        run_command()
    except BrokenPipeError:
        _closed_pipe()


def _leave_while_starting(signum: int, _frame: FrameType | None) -> None:
    if signum == signal.SIGTERM:
        os.write(2, b"hpsearch: SIGTERM before this worker held a trial: exiting (exit 0)\n")
        os._exit(0)
    os.write(2, b"hpsearch: interrupted\n")
    os._exit(130)


def _closed_pipe() -> None:
    # Python would complain again when it flushes stdout at exit: point it at /dev/null.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os._exit(0)
