"""Errors that mean the study's database (or the study) is gone for good, not away for a while.

`search.db.storage.is_transient` retries every lost connection: right for a restart or a network
cut, wrong for a database that was dropped or renamed, whose every reconnect fails the same way.
A worker that meets one of these stops with one line instead of retrying for ever.
"""

from __future__ import annotations

import re

__all__ = ["StudyGone", "gone_reason"]

_MISSING_DATABASE = re.compile(r'database "[^"]*" does not exist')
_GONE_SQLSTATES = {
    "3D000": "the database does not exist (dropped or renamed)",
    "42P01": "hpsearch's tables are missing from the database (dropped, or a different database)",
}


class StudyGone(Exception):
    """The study was deleted from the storage while a worker ran it."""


def gone_reason(exc: BaseException) -> str | None:
    """Why the storage is gone for good, if `exc` (or its cause chain) says so; else None."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return None
        if isinstance(seen, StudyGone):
            return str(seen)
        sqlstate = getattr(seen, "sqlstate", None) or ""
        reason = _GONE_SQLSTATES.get(sqlstate)
        if reason is not None:
            return reason
        text = str(seen)
        if sqlstate == "23503" and 'is not present in table "studies"' in text:
            return "the study was deleted from the storage"
        if _MISSING_DATABASE.search(text):
            return _GONE_SQLSTATES["3D000"]
        if type(seen).__module__ == "sqlite3" and text.startswith("no such table"):
            return "hpsearch's tables are missing from the SQLite file (deleted or replaced)"
        seen = getattr(seen, "orig", None) or seen.__cause__ or seen.__context__
    return None
