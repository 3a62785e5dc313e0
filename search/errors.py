"""One line from an error, for messages that must stay one line."""

from __future__ import annotations

__all__ = ["first_line"]


def first_line(exc: BaseException | None, limit: int = 300) -> str:
    """The first line of an error's text (a database driver's error, if SQLAlchemy wrapped
    one), or its type's name when it has none."""
    if exc is None:
        return "unknown error"
    text = str(getattr(exc, "orig", None) or exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."
