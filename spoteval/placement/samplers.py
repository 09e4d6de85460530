"""Samplers of durations for the simulation: fixed, exponential, or drawn from observed values."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Final, Protocol

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


# --- samplers -----------------------------------------------------------------------------------


class Sampler(Protocol):
    """A distribution of durations in hours."""

    @property
    def mean(self) -> float: ...

    def describe(self) -> str: ...

    def sample(self, rng: np.random.Generator, shape: tuple[int, ...]) -> FloatArray: ...


@dataclass(frozen=True)
class Fixed:
    """Always the same value (draws no random numbers)."""

    value: float

    @property
    def mean(self) -> float:
        return self.value

    def describe(self) -> str:
        return f"fixed {self.value:g} h"

    def sample(self, rng: np.random.Generator, shape: tuple[int, ...]) -> FloatArray:
        return np.full(shape, self.value, dtype=np.float64)


@dataclass(frozen=True)
class Exponential:
    """Exponential with the given mean (a mean of 0 is always 0)."""

    mean_hours: float

    @property
    def mean(self) -> float:
        return self.mean_hours

    def describe(self) -> str:
        return f"exponential, mean {self.mean_hours:g} h"

    def sample(self, rng: np.random.Generator, shape: tuple[int, ...]) -> FloatArray:
        if self.mean_hours == 0:
            return np.zeros(shape, dtype=np.float64)
        return rng.exponential(self.mean_hours, size=shape)


@dataclass(frozen=True)
class Empirical:
    """Drawn with replacement from observed values (e.g. the lifetimes of a trace)."""

    values: tuple[float, ...]
    label: str = "observed values"

    def __post_init__(self) -> None:
        if not self.values or any(not math.isfinite(v) or v < 0 for v in self.values):
            raise ValueError("Empirical needs at least one finite value >= 0")

    @cached_property
    def _array(self) -> FloatArray:
        return np.asarray(self.values, dtype=np.float64)

    @property
    def mean(self) -> float:
        return float(self._array.mean())

    def describe(self) -> str:
        return f"replayed from {len(self.values)} {self.label} (mean {self.mean:.3g} h)"

    def sample(self, rng: np.random.Generator, shape: tuple[int, ...]) -> FloatArray:
        return self._array[rng.integers(0, self._array.size, size=shape)]


#: Named wait/boot models for command lines: name -> constructor from a mean in hours.
DURATION_MODELS: Final[Mapping[str, type[Fixed] | type[Exponential]]] = {
    "fixed": Fixed,
    "exponential": Exponential,
}
