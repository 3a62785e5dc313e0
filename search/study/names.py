"""What the storage would refuse, checked with the config (before anything is written).

Optuna's tables keep study names, parameter names and attribute keys in VARCHAR(512) columns
(`optuna.storages._rdb.models.MAX_INDEXED_STRING_LENGTH`): PostgreSQL refuses a longer value,
SQLite keeps it. PostgreSQL refuses the NUL character in any text; SQLite keeps it. A study
that works on one backend must work on the other, so both are held to the stricter rule here:
names of at most 512 characters, without control characters (NUL, and the others that would
garble every table and log line they are printed in).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

__all__ = ["MAX_NAME_LENGTH", "name_problem", "storage_problem"]

MAX_NAME_LENGTH = 512
"""Characters in a study name, parameter name or attribute key (Optuna's column length)."""


def name_problem(value: str) -> str | None:
    """Why the storage (on either backend) would refuse `value` as a name; None if it is fine."""
    if len(value) > MAX_NAME_LENGTH:
        return (
            f"is {len(value)} characters long; the storage keeps at most {MAX_NAME_LENGTH} "
            "(Optuna's column)"
        )
    for position, char in enumerate(value):
        if unicodedata.category(char) == "Cc":
            what = "the NUL character, which PostgreSQL refuses" if char == "\0" else repr(char)
            return f"contains {what} at position {position}: names take no control characters"
    return None


def storage_problem(study_name: str, metric: str, param_names: Iterable[str]) -> str | None:
    """The first of a config's names the storage would refuse, as a line naming its key."""
    named = [
        ("study.name", study_name),
        ("study.metric", metric),
        *((f"space.{_short(name)}", name) for name in param_names),
    ]
    for key, value in named:
        problem = name_problem(value)
        if problem is None:
            continue
        if key.startswith("space."):
            return f"{key}: the parameter name {problem}"
        return f"{key}: {_short(value)!r} {problem}"
    return None


def _short(value: str) -> str:
    return value if len(value) <= 40 else value[:37] + "..."
