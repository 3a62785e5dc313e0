"""Errors that end a command with one line, and one line from any error.

Exit codes (README): 2 for bad input (`search.study.settings.ConfigError`,
`search.db.storage.StorageError`), 1 for `RuntimeFailure`, a failure of this process or this
machine rather than of the input.
"""

from __future__ import annotations

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_FAILURE",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "RuntimeFailure",
    "first_line",
]

EXIT_OK, EXIT_FAILURE, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
"""Every command's exit codes: done; runtime failure; bad input; interrupted (Ctrl-C)."""


class RuntimeFailure(Exception):
    """This process cannot go on (exit code 1), through no fault of the input: a machine fault
    (its device failed, the task no longer imports) or a sampler that fails. The message is one
    line; whatever trial the process held was handed back or removed first."""


def first_line(exc: BaseException | None, limit: int = 300) -> str:
    """The first line of an error's text (a database driver's error, if SQLAlchemy wrapped
    one), or its type's name when it has none."""
    if exc is None:
        return "unknown error"
    text = str(getattr(exc, "orig", None) or exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."
