"""A trial's params in forms to reuse: `--set` flags that `hpsearch try` and `hpsearch enqueue`
take as they are, and a TOML block (``[params]``, or a ``[[study.enqueue]]`` table)."""

from __future__ import annotations

import json
import math
import shlex
from typing import Any

__all__ = ["as_flags", "as_toml", "flag_value"]


def flag_value(value: Any) -> str:
    """A value as `--set NAME=VALUE` writes it: floats exactly (``repr`` round-trips), the rest
    as `str` (what the space's `parse` reads back)."""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def as_flags(params: dict[str, Any]) -> str:
    """``--set lr=0.003 --set width=32``, quoted for a POSIX shell."""
    return " ".join(f"--set {shlex.quote(f'{k}={flag_value(v)}')}" for k, v in params.items())


def as_toml(params: dict[str, Any], table: str = "params") -> str:
    """A TOML table of the params (``[params]`` by default; ``[[study.enqueue]]`` works too)."""
    header = f"[[{table[2:-2]}]]" if table.startswith("[[") else f"[{table}]"
    return "\n".join([header, *(f"{_key(k)} = {_toml_value(v)}" for k, v in params.items())])


def _key(name: str) -> str:
    bare = name.replace("_", "").replace("-", "").isalnum() and name.isascii()
    return name if bare else json.dumps(name)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, int):
        return str(value)
    return json.dumps(str(value))  # a TOML basic string is a JSON string
