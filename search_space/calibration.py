"""Calibrates the memory model from the peak VRAM that trials report. Pure: numbers in, numbers out.

The model predicts tensor allocations; a real process also holds allocator slack, kernel
workspaces and buffers the model does not list. `Calibration.fit` turns (predicted, measured)
pairs into `measured ≈ factor × predicted + overhead`, lifted so that no observed peak would
have been under-predicted: an over-estimate costs a skipped candidate, an under-estimate a
crashed server start.

Usage:
    calibration = Calibration.fit([MemoryObservation(predicted_peak_bytes=p, measured_peak_bytes=m), ...])
    calibration.apply(estimate.peak_bytes)
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Calibration", "MemoryObservation"]

# Fitting a slope needs predictions that differ; below this relative spread only an offset is fitted.
MIN_SPREAD_FOR_FACTOR = 0.10
MIN_OBSERVATIONS_FOR_FACTOR = 3
FACTOR_BOUNDS = (0.8, 1.5)  # a fitted slope outside this means bad data, not a better model


@dataclass(frozen=True, slots=True)
class MemoryObservation:
    """One trial: the memory model's uncalibrated `MemoryEstimate.peak_bytes`, and the server's reported
    peak (`vram_peak_bytes` in /v1/server_info: torch.cuda.max_memory_allocated after the benchmark)."""

    predicted_peak_bytes: int
    measured_peak_bytes: int

    def __post_init__(self) -> None:
        if self.predicted_peak_bytes <= 0 or self.measured_peak_bytes <= 0:
            raise ValueError(f"memory observations must be positive byte counts, got {self}")


@dataclass(frozen=True, slots=True)
class Calibration:
    """measured ≈ factor × predicted + overhead_bytes. The identity until trials have reported."""

    factor: float = 1.0
    overhead_bytes: int = 0
    observations: int = 0

    def apply(self, predicted_bytes: int) -> int:
        return math.ceil(self.factor * predicted_bytes) + self.overhead_bytes

    @classmethod
    def fit(cls, observations: Iterable[MemoryObservation]) -> Calibration:
        """Least squares when the predictions spread enough, else an offset; then cover the worst miss."""
        obs = list(observations)
        if not obs:
            return cls()
        xs = [o.predicted_peak_bytes for o in obs]
        ys = [o.measured_peak_bytes for o in obs]
        factor = 1.0
        spread = (max(xs) - min(xs)) / max(xs)
        if len(obs) >= MIN_OBSERVATIONS_FOR_FACTOR and spread >= MIN_SPREAD_FOR_FACTOR:
            mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
            sxx = sum((x - mean_x) ** 2 for x in xs)
            sxy = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
            factor = min(max(sxy / sxx, FACTOR_BOUNDS[0]), FACTOR_BOUNDS[1])
        # the smallest offset under which every observation is covered
        overhead = max(y - math.ceil(factor * x) for x, y in zip(xs, ys, strict=True))
        return cls(factor=factor, overhead_bytes=overhead, observations=len(obs))
