"""Calibrates the memory model from the peak VRAM that trials report. Pure: numbers in, numbers out.

The model predicts tensor allocations; a real process also holds allocator slack, kernel
workspaces and buffers the model does not list. `Calibration.fit` turns (predicted, measured)
pairs into `measured ≈ factor × predicted + overhead`, lifted so that no observed peak would
have been under-predicted: an over-estimate costs a skipped candidate, an under-estimate a
crashed server start.

The model's differences are exact where the tensors are known (the KV cache's growth with its tokens,
its format, the weights): a fitted slope under 1 (peaks that grew slower than predicted, say configurations
that differ in a workspace the model over-predicts) would under-predict that growth past the observations,
and one over 1 below them. So a prediction is never less than an observed peak plus the model's own
difference from it (`growth_overhead_bytes`: the slope-1 offset that covers every observation).

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
    """measured ≈ factor × predicted + overhead_bytes, and never under predicted + growth_overhead_bytes.
    The identity until trials have reported."""

    factor: float = 1.0
    overhead_bytes: int = 0
    observations: int = 0
    growth_overhead_bytes: int | None = None  # None: no floor (a calibration given, not fitted)

    def apply(self, predicted_bytes: int) -> int:
        fitted = math.ceil(self.factor * predicted_bytes) + self.overhead_bytes
        if self.growth_overhead_bytes is None:
            return fitted
        return max(fitted, predicted_bytes + self.growth_overhead_bytes)

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
        growth = max(y - x for x, y in zip(xs, ys, strict=True))  # the same, at the model's own slope
        return cls(factor=factor, overhead_bytes=overhead, observations=len(obs), growth_overhead_bytes=growth)
