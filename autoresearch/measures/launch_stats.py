"""Inference on launches: each launch one reading, speeds on logs, the spread pooled over configurations.

Why: runs inside one launch share its state (allocations, autotuning, clocks), so they describe the launch; the
launch is the unit of evidence, and a ratio of speeds is a difference of logs. These are the numbers the speed
verdict (autoresearch.measures.faster) tests: the candidate's mean log gain over the reference, its standard error
from the launch-to-launch spread pooled with every launch of the reference the study holds, Student's t.

Usage:
    diffs = log_diffs(reference_readings, candidate_readings, history=earlier_reference_readings)
    diffs[REQUEST].p_above(1.02), diffs[REQUEST].interval(0.025)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from autoresearch.ground.errors import AutoresearchError
from autoresearch.measures.student_t import t_ppf, t_sf

__all__ = ["REQUEST", "LogDiff", "Reading", "Spread", "VerdictError", "geometric_cost", "log_diffs", "pooled_spread"]

REQUEST = "request"  # the cost's key among a verdict's metrics (the points keep bench's metric names)


class VerdictError(AutoresearchError):
    """A rule that cannot decide anything (e.g. alpha outside (0, 1), fewer than two launches a side)."""



@dataclass(frozen=True)
class Reading:
    """One launch of one configuration as the verdict sees it: its cost on the workload (seconds or joules per
    request, lower is better) and each point's median rate (tokens per second or per joule, higher is better)."""

    cost: float
    points: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (self.cost > 0 and math.isfinite(self.cost)) or any(not (v > 0 and math.isfinite(v))
                                                                     for v in self.points.values()):
            raise VerdictError(f"a launch's cost and rates must be positive and finite, got {self.cost} and "
                               f"{dict(self.points)}: an unmeasured launch does not count, it is not a reading")

    def gains(self) -> dict[str, float]:
        """Log gains, higher is better: -log cost under REQUEST, log rate under each point."""
        return {REQUEST: -math.log(self.cost), **{k: math.log(v) for k, v in self.points.items()}}


def geometric_cost(readings: Sequence[Reading]) -> float:
    """One side's cost as the verdict's ratio takes it: the geometric mean over its launches, so that
    judge_speed(a, b).speedup == geometric_cost(a) / geometric_cost(b)."""
    return math.exp(sum(math.log(r.cost) for r in readings) / len(readings))


@dataclass(frozen=True)
class Spread:
    """A log measure's launch-to-launch variance pooled over configurations (each group: one configuration's
    launches), with its degrees of freedom (0: no two launches of one configuration, nothing known)."""

    var: float
    df: int

    @property
    def sd(self) -> float:
        return math.sqrt(self.var)


def pooled_spread(groups: Iterable[Sequence[float]]) -> Spread:
    """The pooled within-configuration variance of log values: sum of squares about each group's mean over
    sum of (n - 1)."""
    ss, df = 0.0, 0
    for g in groups:
        if len(g) > 1:
            mean = sum(g) / len(g)
            ss += sum((x - mean) ** 2 for x in g)
            df += len(g) - 1
    return Spread(ss / df if df else math.nan, df)


@dataclass(frozen=True)
class LogDiff:
    """A candidate's mean log gain over the reference on one metric, with its standard error."""

    metric: str
    d: float
    se: float
    df: int

    def p_above(self, bound: float) -> float:
        """One-sided p-value of H0: d <= log(bound) (small: shown above `bound`)."""
        return _p(self, bound, upper=True)

    def p_below(self, bound: float) -> float:
        """One-sided p-value of H0: d >= log(bound) (small: shown below `bound`)."""
        return _p(self, bound, upper=False)

    def interval(self, level: float) -> tuple[float, float] | tuple[None, None]:
        """The ratio's two-sided interval with `level` in each tail; (None, None) where no spread is known (one
        launch a side and none before): an unknown interval is not a number."""
        if self.df < 1 or not self.se >= 0:
            return None, None
        if self.se == 0:
            return math.exp(self.d), math.exp(self.d)
        q = t_ppf(1.0 - min(max(level, 1e-12), 0.5), self.df)
        return math.exp(self.d - q * self.se), math.exp(self.d + q * self.se)

    def to_dict(self, level: float) -> dict:
        low, high = self.interval(level)
        return {"metric": self.metric, "ratio": math.exp(self.d), "low": low, "high": high, "se_log": self.se,
                "df": self.df}


def _p(diff: LogDiff, bound: float, *, upper: bool) -> float:
    if diff.df < 1 or not diff.se >= 0:
        return 1.0  # no launch-to-launch spread known: nothing can be shown
    delta = diff.d - math.log(bound)
    if diff.se == 0:
        return 0.0 if (delta > 0 if upper else delta < 0) else 1.0
    t = delta / diff.se
    return t_sf(t if upper else -t, diff.df)


def log_diffs(reference: Sequence[Reading], candidate: Sequence[Reading], history: Sequence[Reading] = ()
              ) -> dict[str, LogDiff]:
    """Each metric both sides measured in every launch: the candidate's mean log gain over the reference's launches
    of this round, its variance pooled from the reference's launches with `history` (one configuration) and the
    candidate's own."""
    ref = [r.gains() for r in reference]
    cand = [r.gains() for r in candidate]
    past = [r.gains() for r in history]
    metrics = set.intersection(*(set(g) for g in (*ref, *cand)))
    out = {}
    for m in sorted(metrics):
        r = [g[m] for g in ref]
        c = [g[m] for g in cand]
        spread = pooled_spread([[g[m] for g in past if m in g] + r, c])
        se = spread.sd * math.sqrt(1 / len(r) + 1 / len(c)) if spread.df else math.nan
        out[m] = LogDiff(m, sum(c) / len(c) - sum(r) / len(r), se, spread.df)
    return out
