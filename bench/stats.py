"""Pure statistics for speed samples: median with a distribution-free interval, stopping, drift, and
the rule that calls two configurations different.

Timing samples are skewed and few (3-10 per point), so everything is built on order statistics, not
on means and normal theory. All functions are pure: they take numbers and return frozen records.

Usage:
    s = summarize([70.1, 70.4, 69.8])            # Summary(n=3, median=70.1, ci_low=69.8, ...)
    is_settled(s, min_n=3, target_rel_ci=0.02)   # stop repeating?
    floor = noise_floor(launch_a_samples, launch_b_samples)      # same config, two fresh launches
    compare(base_samples, cand_samples, noise_floor=floor)       # Comparison per metric

The "are these different?" rule (DifferenceRule, used by compare):
    ratio = median(candidate) / median(baseline), for rates where higher is better.
    Its interval is [cand.ci_low / base.ci_high, cand.ci_high / base.ci_low], from the two medians'
    order-statistic intervals (conservative: it excludes 1 exactly when the intervals do not overlap;
    with 3 runs each that is "all three candidate runs beat all three baseline runs", the one-sided
    exact Mann-Whitney test at p = 0.05).
    margin = max(min_effect_rel, noise_factor * launch-to-launch noise floor of that metric).
    faster: interval above 1 and ratio - 1 > margin; slower: interval below 1 and 1 - ratio > margin;
    otherwise same. The interval guards against within-launch noise, the margin against
    launch-to-launch noise that repeats inside one launch cannot see (Kalibera & Jones 2013).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from bench.errors import BenchConfigError, MissingMetric

__all__ = [
    "Comparison",
    "DifferenceRule",
    "NoiseFloor",
    "Summary",
    "compare",
    "compare_one",
    "drift_rel",
    "find_stalls",
    "is_settled",
    "median_ci",
    "noise_floor",
    "summarize",
]

Verdict = Literal["faster", "slower", "same"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Summary:
    """Median of n samples with an order-statistic interval whose coverage is `ci_level`."""

    n: int
    median: float
    ci_low: float
    ci_high: float
    ci_level: float  # achieved coverage of [ci_low, ci_high] for the true median (exact, binomial)
    mad: float  # median absolute deviation from the median, unscaled
    min: float
    max: float

    @property
    def rel_ci_half_width(self) -> float:
        """Half the interval's width relative to the median: the spread the stopping rule watches."""
        return (self.ci_high - self.ci_low) / (2 * abs(self.median)) if self.median else math.inf

    @property
    def rel_mad(self) -> float:
        return self.mad / abs(self.median) if self.median else math.inf

    def to_dict(self) -> dict[str, float]:
        return {
            "n": self.n,
            "median": self.median,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "ci_level": self.ci_level,
            "mad": self.mad,
            "min": self.min,
            "max": self.max,
            "rel_ci_half_width": self.rel_ci_half_width,
        }


def _median(sorted_values: Sequence[float]) -> float:
    n = len(sorted_values)
    mid = n // 2
    return sorted_values[mid] if n % 2 else (sorted_values[mid - 1] + sorted_values[mid]) / 2


def median_ci(samples: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """Distribution-free interval for the median: (low, high, achieved coverage).

    The narrowest symmetric pair of order statistics (x_(j), x_(n+1-j)) whose binomial coverage
    1 - 2 * P(Bin(n, 1/2) <= j - 1) reaches `confidence`. With too few samples for that, the full
    range is returned with the coverage it actually has (3 samples: 75 %), never a made-up width.
    """
    if not samples:
        raise BenchConfigError("median_ci needs at least one sample")
    if not 0 < confidence < 1:
        raise BenchConfigError(f"confidence must be in (0, 1), got {confidence}")
    xs = sorted(samples)
    n = len(xs)
    if n == 1:
        return xs[0], xs[0], 0.0
    best_j, best_cov = 1, _coverage(n, 1)
    for j in range(2, n // 2 + 1):
        cov = _coverage(n, j)
        if cov < confidence:
            break
        best_j, best_cov = j, cov
    return xs[best_j - 1], xs[n - best_j], best_cov


def _coverage(n: int, j: int) -> float:
    tail = sum(math.comb(n, i) for i in range(j)) / 2**n
    return 1 - 2 * tail


def summarize(samples: Sequence[float], confidence: float = 0.95) -> Summary:
    """Median, its interval, MAD and range of `samples` (at least one)."""
    xs = sorted(float(x) for x in samples)
    if not xs:
        raise BenchConfigError("summarize needs at least one sample")
    if any(not math.isfinite(x) for x in xs):
        raise BenchConfigError(f"samples must be finite numbers, got {xs}")
    med = _median(xs)
    low, high, level = median_ci(xs, confidence)
    mad = _median(sorted(abs(x - med) for x in xs))
    return Summary(
        n=len(xs), median=med, ci_low=low, ci_high=high, ci_level=level, mad=mad, min=xs[0], max=xs[-1]
    )


def is_settled(summary: Summary | None, *, min_n: int, target_rel_ci: float) -> bool:
    """Stop repeating: at least `min_n` valid samples and a relative half-interval within target."""
    return summary is not None and summary.n >= min_n and summary.rel_ci_half_width <= target_rel_ci


def drift_rel(samples_in_order: Sequence[float]) -> float | None:
    """Relative change from the first half's median to the second half's (None under 4 samples).

    A large value (over about 0.05) means the server or GPU changed state during the point
    (thermal throttling, a background job), which repeats cannot average away.
    """
    n = len(samples_in_order)
    if n < 4:
        return None
    first = _median(sorted(samples_in_order[: n // 2]))
    second = _median(sorted(samples_in_order[n - n // 2 :]))
    return (second - first) / first if first else None


def find_stalls(
    rates: Sequence[float],
    busy: Sequence[float | None],
    *,
    rate_factor: float = 0.5,
    busy_factor: float = 0.5,
    min_others: int = 2,
) -> dict[int, str]:
    """Runs that stalled on a one-time cost, by index, each with the evidence.

    A run stalled when it ran at under `rate_factor` of the other runs' median rate while the GPU
    was busy under `busy_factor` of their median utilization: the time went to something other than
    the GPU doing this request's work (on exllamav3, a Triton kernel compiled for a prompt length
    the warm-ups did not cover: 3.6-8 s for a 1.2 s prefill, GPU 13-20% busy against 57-84%).
    Slow runs with a busy GPU are kept: they are the measurement. Needs GPU telemetry (`busy` None
    for a run says nothing) and `min_others` other runs to compare with.
    """
    if len(rates) != len(busy):
        raise ValueError(f"{len(rates)} rates but {len(busy)} utilizations")
    stalls: dict[int, str] = {}
    for i, (rate, util) in enumerate(zip(rates, busy, strict=True)):
        others = [j for j in range(len(rates)) if j != i]
        other_busy = [b for j in others if (b := busy[j]) is not None]
        if util is None or len(others) < min_others or len(other_busy) < min_others:
            continue
        typical_rate = _median(sorted(rates[j] for j in others))
        typical_busy = _median(sorted(other_busy))
        if rate < rate_factor * typical_rate and util < busy_factor * typical_busy:
            stalls[i] = (
                f"stall: {rate:,.1f}/s against {typical_rate:,.1f}/s for the other runs while the GPU was "
                f"{util:.0f}% busy against {typical_busy:.0f}% (a one-time cost such as a kernel compile)"
            )
    return stalls


@dataclass(frozen=True, kw_only=True, slots=True)
class NoiseFloor:
    """Launch-to-launch relative difference of each metric's median, same configuration."""

    rel_diff: tuple[tuple[str, float], ...]  # (metric, |median_b / median_a - 1|), sorted by metric

    def of(self, metric: str) -> float | None:
        return dict(self.rel_diff).get(metric)

    @property
    def worst(self) -> float | None:
        return max((v for _, v in self.rel_diff), default=None)

    def to_dict(self) -> dict[str, float]:
        return dict(self.rel_diff)


def noise_floor(
    first_launch: Mapping[str, Sequence[float]], second_launch: Mapping[str, Sequence[float]]
) -> NoiseFloor:
    """The noise floor from two launches of one configuration, over the metrics both measured."""
    diffs = []
    for metric in sorted(set(first_launch) & set(second_launch)):
        a, b = first_launch[metric], second_launch[metric]
        if a and b:
            ma, mb = summarize(a).median, summarize(b).median
            if ma:
                diffs.append((metric, abs(mb / ma - 1)))
    return NoiseFloor(rel_diff=tuple(diffs))


@dataclass(frozen=True, kw_only=True, slots=True)
class DifferenceRule:
    """Parameters of the "are these two configurations different?" rule (module docstring)."""

    min_effect_rel: float = 0.01  # never call differences under 1 % real, whatever the floor
    noise_factor: float = 2.0  # margin = noise_factor * launch-to-launch floor of the metric
    confidence: float = 0.95  # coverage asked of each median's interval

    def __post_init__(self) -> None:
        if self.min_effect_rel < 0 or self.noise_factor < 0:
            raise BenchConfigError(
                f"DifferenceRule needs min_effect_rel >= 0 and noise_factor >= 0, got "
                f"{self.min_effect_rel} and {self.noise_factor}"
            )
        if not 0 < self.confidence < 1:
            raise BenchConfigError(f"DifferenceRule.confidence must be in (0, 1), got {self.confidence}")


@dataclass(frozen=True, kw_only=True, slots=True)
class Comparison:
    """Candidate against baseline on one rate metric (higher is better)."""

    metric: str
    baseline: Summary
    candidate: Summary
    ratio: float  # candidate median / baseline median
    ratio_ci_low: float
    ratio_ci_high: float
    margin_rel: float  # the effect size a difference must exceed
    verdict: Verdict

    def to_dict(self) -> dict[str, object]:
        return {
            "metric": self.metric,
            "baseline": self.baseline.to_dict(),
            "candidate": self.candidate.to_dict(),
            "ratio": self.ratio,
            "ratio_ci_low": self.ratio_ci_low,
            "ratio_ci_high": self.ratio_ci_high,
            "margin_rel": self.margin_rel,
            "verdict": self.verdict,
        }


def compare_one(
    metric: str,
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    rule: DifferenceRule = DifferenceRule(),
    floor_rel: float | None = None,
) -> Comparison:
    """Apply the difference rule to one metric's samples (both non-empty, positive rates).

    `floor_rel` None: no launch-to-launch floor is known, and the margin is the minimum effect.
    """
    base, cand = summarize(baseline, rule.confidence), summarize(candidate, rule.confidence)
    if base.min <= 0 or cand.min <= 0:
        raise BenchConfigError(f"{metric}: rates must be positive to form a ratio")
    ratio = cand.median / base.median
    low, high = cand.ci_low / base.ci_high, cand.ci_high / base.ci_low
    margin = max(rule.min_effect_rel, rule.noise_factor * (floor_rel or 0.0))
    verdict: Verdict = "same"
    if low > 1 and ratio - 1 > margin:
        verdict = "faster"
    elif high < 1 and 1 - ratio > margin:
        verdict = "slower"
    return Comparison(
        metric=metric,
        baseline=base,
        candidate=cand,
        ratio=ratio,
        ratio_ci_low=low,
        ratio_ci_high=high,
        margin_rel=margin,
        verdict=verdict,
    )


def compare(
    baseline: Mapping[str, Sequence[float]],
    candidate: Mapping[str, Sequence[float]],
    *,
    noise_floor: NoiseFloor | None,
    rule: DifferenceRule = DifferenceRule(),
    metrics: Iterable[str] | None = None,
) -> tuple[Comparison, ...]:
    """Compare `metrics` (default: every metric either side measured), one Comparison each.

    Nothing unmeasured is compared, and nothing is skipped: a metric without samples on either
    side, or missing from a given noise floor, raises MissingMetric naming it. `noise_floor` None
    states that no launch-to-launch floor is known: the margin is then the rule's minimum effect.
    """
    wanted = sorted(set(metrics) if metrics is not None else {*baseline, *candidate})
    missing = [
        f"{m} ({'baseline' if not baseline.get(m) else 'candidate'} has no samples)"
        for m in wanted
        if not baseline.get(m) or not candidate.get(m)
    ]
    if noise_floor is not None:
        missing += [f"{m} (the noise floor lacks it)" for m in wanted if noise_floor.of(m) is None]
    if missing:
        raise MissingMetric(f"cannot compare what was not measured: {'; '.join(missing)}")
    return tuple(
        compare_one(
            m,
            baseline[m],
            candidate[m],
            rule=rule,
            floor_rel=noise_floor.of(m) if noise_floor is not None else None,
        )
        for m in wanted
    )
