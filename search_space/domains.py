"""Typed knob domains that convert to Optuna distributions, and the explicit "exllamav3 decides" value.

A domain knows its values, how to ask a trial for one (keyword arguments only: Optuna 5.0 raises
TypeError on positional `step`/`log`), how to write a value as a trial parameter, and its size.

Usage:
    domain = Categorical((USE_DEFAULT, 512, 1024))
    domain.to_distribution()        # CategoricalDistribution(choices=('default', 512, 1024))
    value = domain.suggest(trial, "recurrent_checkpoint_interval")   # USE_DEFAULT, 512 or 1024
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

__all__ = ["USE_DEFAULT", "Categorical", "Domain", "FloatRange", "IntRange", "UseDefault"]


class UseDefault:
    """The value "let exllamav3 decide": the argument is not passed, or the variable is not set."""

    _instance: UseDefault | None = None
    OPTUNA_TOKEN: Final = "default"  # how the value is stored as a trial parameter

    def __new__(cls) -> UseDefault:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "default"

    def __reduce__(self) -> str:
        return "USE_DEFAULT"


USE_DEFAULT: Final = UseDefault()

_PLAIN = (type(None), bool, int, float, str)


def _to_param(value: Any) -> Any:
    return UseDefault.OPTUNA_TOKEN if value is USE_DEFAULT else value


def _from_param(value: Any) -> Any:
    return USE_DEFAULT if value == UseDefault.OPTUNA_TOKEN else value


def _same(a: Any, b: Any) -> bool:
    """Equality that keeps True apart from 1 (Optuna stores bools and ints as different choices)."""
    return type(a) is type(b) and a == b


@dataclass(frozen=True, slots=True)
class Categorical:
    """A finite set of values, in the order they are listed (TPE treats them as unordered)."""

    choices: tuple[Any, ...]

    def __post_init__(self) -> None:
        if not self.choices:
            raise ValueError("a categorical domain needs at least one choice")
        for choice in self.choices:
            if choice is not USE_DEFAULT and not isinstance(choice, _PLAIN):
                raise ValueError(f"categorical choice {choice!r} is not None, bool, int, float or str")
            if choice == UseDefault.OPTUNA_TOKEN:
                raise ValueError(f"the string {choice!r} is reserved for USE_DEFAULT")
        if len({(type(c), c) for c in self.choices}) != len(self.choices):
            raise ValueError(f"categorical choices repeat: {self.choices!r}")

    def contains(self, value: Any) -> bool:
        return any(_same(value, c) for c in self.choices)

    @property
    def size(self) -> int:
        return len(self.choices)

    @property
    def is_finite(self) -> bool:
        return True

    def values(self) -> tuple[Any, ...]:
        return self.choices

    def to_distribution(self) -> BaseDistribution:
        return CategoricalDistribution(tuple(_to_param(c) for c in self.choices))

    def suggest(self, trial: optuna.trial.BaseTrial, name: str) -> Any:
        return _from_param(trial.suggest_categorical(name, [_to_param(c) for c in self.choices]))

    def to_param(self, value: Any) -> Any:
        return _to_param(value)

    def from_param(self, param: Any) -> Any:
        return _from_param(param)

    def restricted(self, keep: Callable[[Any], bool]) -> Categorical:
        return Categorical(tuple(c for c in self.choices if keep(c)))

    def describe(self) -> str:
        return "{" + ", ".join(_describe_value(c) for c in self.choices) + "}"


@dataclass(frozen=True, slots=True)
class IntRange:
    """Integers low..high (inclusive) on a step grid, or log-spaced (Optuna forbids both at once)."""

    low: int
    high: int
    step: int = 1
    log: bool = False

    def __post_init__(self) -> None:
        if self.low > self.high:
            raise ValueError(f"IntRange low {self.low} exceeds high {self.high}")
        if self.step < 1:
            raise ValueError(f"IntRange step must be >= 1, got {self.step}")
        if self.log and (self.step != 1 or self.low < 1):
            raise ValueError("a log IntRange needs step 1 and low >= 1")
        if (self.high - self.low) % self.step:
            raise ValueError(f"IntRange high {self.high} is not on the step-{self.step} grid from {self.low}")

    def contains(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, int):
            return False
        return self.low <= value <= self.high and (value - self.low) % self.step == 0

    @property
    def size(self) -> int:
        return (self.high - self.low) // self.step + 1

    @property
    def is_finite(self) -> bool:
        return True

    def values(self) -> tuple[int, ...]:
        return tuple(range(self.low, self.high + 1, self.step))

    def to_distribution(self) -> BaseDistribution:
        return IntDistribution(self.low, self.high, log=self.log, step=self.step)

    def suggest(self, trial: optuna.trial.BaseTrial, name: str) -> int:
        return trial.suggest_int(name, self.low, self.high, step=self.step, log=self.log)

    def to_param(self, value: Any) -> Any:
        return value

    def from_param(self, param: Any) -> Any:
        return param

    def describe(self) -> str:
        text = f"{self.low}..{self.high}"
        if self.step != 1:
            text += f" step {self.step}"
        return text + (" (log)" if self.log else "")


@dataclass(frozen=True, slots=True)
class FloatRange:
    """Floats low..high; with `step` a finite grid, without it a continuum."""

    low: float
    high: float
    step: float | None = None
    log: bool = False

    def __post_init__(self) -> None:
        if self.low > self.high:
            raise ValueError(f"FloatRange low {self.low} exceeds high {self.high}")
        if self.step is not None and (self.step <= 0 or self.log):
            raise ValueError("a FloatRange step must be > 0 and cannot be combined with log")
        if self.log and self.low <= 0:
            raise ValueError("a log FloatRange needs low > 0")

    def contains(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if not self.low - 1e-12 <= value <= self.high + 1e-12:
            return False
        if self.step is None:
            return True
        steps = (value - self.low) / self.step
        return abs(steps - round(steps)) < 1e-6

    @property
    def size(self) -> float | int:
        if self.step is None:
            return math.inf
        return int(round((self.high - self.low) / self.step)) + 1

    @property
    def is_finite(self) -> bool:
        return self.step is not None

    def values(self) -> tuple[float, ...]:
        if self.step is None:
            raise ValueError("a continuous FloatRange cannot list its values")
        return tuple(round(self.low + i * self.step, 10) for i in range(int(self.size)))

    def to_distribution(self) -> BaseDistribution:
        return FloatDistribution(self.low, self.high, log=self.log, step=self.step)

    def suggest(self, trial: optuna.trial.BaseTrial, name: str) -> float:
        return trial.suggest_float(name, self.low, self.high, step=self.step, log=self.log)

    def to_param(self, value: Any) -> Any:
        return float(value)

    def from_param(self, param: Any) -> Any:
        return float(param)

    def describe(self) -> str:
        text = f"{self.low:g}..{self.high:g}"
        if self.step is not None:
            text += f" step {self.step:g}"
        return text + (" (log)" if self.log else "")


Domain = Categorical | IntRange | FloatRange


def _describe_value(value: Any) -> str:
    if value is USE_DEFAULT:
        return "default"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
