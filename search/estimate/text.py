"""How `hpsearch estimate` prints: aligned columns, values, ratios, times."""

from __future__ import annotations

import statistics
from typing import Any

from search.terminal import format_value

__all__ = ["columns", "params_text", "plain_ratio", "ratio", "seconds"]


def columns(table: list[tuple[str, ...]], right: range) -> list[str]:
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return [
        "  ".join(
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ).rstrip()
        for row in table
    ]


def params_text(params: dict[str, Any]) -> str:
    return " ".join(f"{k}={format_value(v)}" for k, v in params.items())


def ratio(value: float | None, base: float | None) -> str:
    ratio = plain_ratio(value, base)
    return "-" if ratio is None else f"{ratio:.2f}"


def plain_ratio(value: float | None, base: float | None) -> float | None:
    return None if value is None or not base else value / base


def seconds(values: list[float]) -> str:
    if not values:
        return "-"
    mid = statistics.median(values)
    unit, scale = ("ms", 1e3) if mid < 1 else ("s", 1.0)
    return f"{mid * scale:.1f} {unit} ({min(values) * scale:.1f}-{max(values) * scale:.1f})"
