"""Warm starts: known configurations a study runs first, exactly once (``[[study.enqueue]]`` in
the config, `hpsearch enqueue --study S --set k=v`), checked against its ``[space]``.

A configuration names some or all params; those not named are sampled like any trial's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from search.study.space import FloatParam, Param

__all__ = ["EnqueueError", "check_enqueued", "parse_enqueue", "parse_enqueue_flags"]


class EnqueueError(ValueError):
    """A configuration that does not fit the space (the caller makes it a ConfigError)."""


def check_enqueued(space: Sequence[Param], params: dict[str, Any], where: str) -> dict[str, Any]:
    """`params` if each names a parameter of `space` with a value inside it (an integer for a
    float parameter becomes a float); else EnqueueError naming `where` and the key."""
    by_name = {p.name: p for p in space}
    out: dict[str, Any] = {}
    for name, value in params.items():
        key = f"--set {name}" if where == "--set" else f"{where}.{name}"
        param = by_name.get(name)
        if param is None:
            known = ", ".join(by_name) or "(none)"
            raise EnqueueError(f"{key}: not a parameter of the config's [space] ({known})")
        if isinstance(param, FloatParam) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not param.contains(value):
            shown = f"{key}={value!r}" if where == "--set" else f"{key} = {value!r}"
            raise EnqueueError(f"{shown}: outside space.{name} {param.describe()}")
        out[name] = value
    if not out:
        raise EnqueueError(f"{where}: names no parameter")
    return out


def parse_enqueue(tables: Any, space: Sequence[Param]) -> tuple[dict[str, Any], ...]:
    """``[[study.enqueue]]``: a list of tables, each checked against the space."""
    if tables is None:
        return ()
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise EnqueueError(
            "study.enqueue: must be [[study.enqueue]] tables, e.g. [[study.enqueue]] lr = 0.003"
        )
    return tuple(
        check_enqueued(space, table, f"study.enqueue[{i}]") for i, table in enumerate(tables)
    )


def parse_enqueue_flags(space: Sequence[Param], overrides: Sequence[str]) -> dict[str, Any]:
    """``--set NAME=VALUE`` flags into one configuration, checked against the space."""
    by_name = {p.name: p for p in space}
    params: dict[str, Any] = {}
    for text in overrides:
        name, sep, raw = text.partition("=")
        name = name.strip()
        if not sep or not name:
            raise EnqueueError(f"--set {text!r}: expected NAME=VALUE, e.g. --set lr=0.003")
        param = by_name.get(name)
        if param is None:
            known = ", ".join(by_name) or "(none)"
            raise EnqueueError(f"--set {name}: not a parameter of the study's [space] ({known})")
        try:
            params[name] = param.parse(raw.strip())
        except ValueError:
            raise EnqueueError(
                f"--set {name}={raw}: not a valid value for space.{name} {param.describe()}"
            ) from None
    return check_enqueued(space, params, "--set")
