"""Search spaces as data: one parameter spec per `[space]` entry.

Specs are plain frozen dataclasses (no Optuna import here), so the trainer's command line can
check a hand-set value against the space without loading Optuna. ``search.sampling.samplers`` turns
them into Optuna distributions.

Example::

    >>> lr = FloatParam(name="lr", low=1e-4, high=1e-1, log=True)
    >>> [f"{v:g}" for v in lr.grid_values(4)]
    ['0.0001', '0.001', '0.01', '0.1']
    >>> lr.contains(0.5)
    False
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["CategoricalParam", "FloatParam", "IntParam", "Param", "Scalar", "param_from_dict"]

Scalar = bool | int | float | str


@dataclass(frozen=True, kw_only=True)
class FloatParam:
    """A real-valued hyperparameter in [low, high]."""

    name: str
    low: float
    high: float
    log: bool = False
    """Sample uniformly in log space (learning rates, weight decay)."""
    step: float | None = None
    """Discretization step (not with log)."""

    def contains(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        return self.low <= float(value) <= self.high

    def grid_values(self, points: int) -> list[float]:
        """`points` values evenly spaced over [low, high] (log-spaced when log = true)."""
        if points == 1:
            return [_geometric_mid(self.low, self.high) if self.log else (self.low + self.high) / 2]
        if self.log:
            lo, hi = math.log10(self.low), math.log10(self.high)
            values = [10 ** (lo + (hi - lo) * i / (points - 1)) for i in range(points)]
            values[0], values[-1] = self.low, self.high  # exact ends despite rounding in 10**x
        else:
            values = [self.low + (self.high - self.low) * i / (points - 1) for i in range(points)]
        if self.step is not None:
            values = [self.low + round((v - self.low) / self.step) * self.step for v in values]
        return _unique(values)

    def parse(self, text: str) -> float:
        return float(text)

    def center(self) -> float:
        """The value used when none is given: the (geometric, if log) middle of the range."""
        return self.grid_values(1)[0]

    def describe(self) -> str:
        return f"[{self.low:g}, {self.high:g}]" + (" (log)" if self.log else "")


@dataclass(frozen=True, kw_only=True)
class IntParam:
    """An integer hyperparameter in [low, high]."""

    name: str
    low: int
    high: int
    log: bool = False
    step: int = 1

    def contains(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, int):
            return False
        return self.low <= value <= self.high and (value - self.low) % self.step == 0

    def grid_values(self, points: int) -> list[int]:
        """Up to `points` distinct integers spread over [low, high] (log-spaced when log = true)."""
        spread = FloatParam(name=self.name, low=self.low, high=self.high, log=self.log)
        values = [
            self.low + round((v - self.low) / self.step) * self.step
            for v in spread.grid_values(points)
        ]
        return _unique([min(v, self.high) for v in values])

    def parse(self, text: str) -> int:
        return int(text)

    def center(self) -> int:
        return self.grid_values(1)[0]

    def describe(self) -> str:
        return f"[{self.low}, {self.high}]" + (" (log)" if self.log else "")


@dataclass(frozen=True, kw_only=True)
class CategoricalParam:
    """A choice among listed values (numbers, strings or booleans)."""

    name: str
    choices: tuple[Scalar, ...]

    def contains(self, value: Any) -> bool:
        return any(type(value) is type(c) and value == c for c in self.choices)

    def grid_values(self, points: int) -> list[Scalar]:
        """Every choice: a categorical grid does not subsample."""
        return list(self.choices)

    def parse(self, text: str) -> Scalar:
        for choice in self.choices:
            if str(choice) == text or (
                isinstance(choice, bool) and text.lower() == str(choice).lower()
            ):
                return choice
            if isinstance(choice, (int, float)) and not isinstance(choice, bool):
                try:
                    if float(text) == choice:
                        return choice
                except ValueError:
                    pass
        return text

    def center(self) -> Scalar:
        """The middle choice (for [32, 64, 128]: 64)."""
        return self.choices[(len(self.choices) - 1) // 2]

    def describe(self) -> str:
        return "{" + ", ".join(str(c) for c in self.choices) + "}"


Param = FloatParam | IntParam | CategoricalParam


def param_from_dict(name: str, spec: dict[str, Any]) -> Param:
    """Rebuild a spec from its stored form (`dataclasses.asdict` plus `type`); trusted input."""
    kind = spec["type"]
    fields = {k: v for k, v in spec.items() if k != "type"}
    if kind == "float":
        return FloatParam(name=name, **{k: v for k, v in fields.items() if k != "name"})
    if kind == "int":
        return IntParam(name=name, **{k: v for k, v in fields.items() if k != "name"})
    return CategoricalParam(name=name, choices=tuple(fields["choices"]))


def param_to_dict(param: Param) -> dict[str, Any]:
    """The stored form of a spec: JSON-friendly, with its `type`."""
    if isinstance(param, FloatParam):
        return {
            "type": "float",
            "low": param.low,
            "high": param.high,
            "log": param.log,
            "step": param.step,
        }
    if isinstance(param, IntParam):
        return {
            "type": "int",
            "low": param.low,
            "high": param.high,
            "log": param.log,
            "step": param.step,
        }
    return {"type": "categorical", "choices": list(param.choices)}


def _geometric_mid(low: float, high: float) -> float:
    return math.sqrt(low * high)


def _unique(values: list[Any]) -> list[Any]:
    seen: list[Any] = []
    for v in values:
        if v not in seen:
            seen.append(v)
    return seen
