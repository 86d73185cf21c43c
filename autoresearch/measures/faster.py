"""The one rule that calls one configuration better than another (faster, or less energy), wherever the loop decides it.

Finalists against the baseline, a removal against the champion (autoresearch.champion.minimize), one TabbyAPI
subset against another: each is "faster" only when the workload's request time is shorter beyond the
launch-to-launch noise AND it is slower on no measured point beyond that point's floor. A point
faster, with request time inside the noise, is not enough (a prefill gain on a decode-heavy workload
is a slower configuration).

The method, on each side's fresh launches: every launch gives one time (the workload's mean request
time, autoresearch.measures.request_time; in a study ranked by the geometric mean, 1 / sqrt(decode x prefill)),
and bench's difference rule (bench.stats.compare_one) is applied to the launches' rates 1 / time:

    speed-up = median(time of the reference) / median(time of the candidate)      (per-launch medians)
    interval = [candidate's lowest / reference's highest, candidate's highest / reference's lowest]
               from the two medians' order-statistic intervals (with 2-3 launches a side, their range:
               it excludes 1 only when every candidate launch beats every reference launch)
    margin   = max(1%, 2 x the request time's launch-to-launch noise floor)

faster: the interval is above 1, the speed-up beyond the margin, and no point slower (bench.compare);
slower: the interval is below 1 and the slow-down beyond the margin, or some point is slower;
otherwise "not shown faster" (stored as `same`). The caller gives the request time's noise floor: the
finalists derive it from the baseline's per-point floors (autoresearch.measures.ranking.Ranking.cost_floor: every
point slower by its floor at once), a minimization from the champion's own first two launches
(`request_floor`: |T1 / T0 - 1|).

The same rule ranks by energy (--rank-by energy): each launch gives its joules per request on the
workload (RequestMix.energy_j) in place of its time, the floor is energy's launch-to-launch noise and
the points are bench's energy points (tokens per joule); `measure=ENERGY` only changes the words
("less energy", "more energy", "not shown to use less energy"). The verdict's field names keep
bench's words (`faster`: the cost is lower beyond the noise).

Usage:
    v = judge_speed(base_times, cand_times, floor_rel=request_floor(base_times), points=comparisons)
    v.faster, v.verdict, v.speedup, v.interval, v.text()
    median_cost(base_times)      # one side's cost as the speed-up takes it (what RESULTS.md shows beside it)
    judge_speed(base_joules, cand_joules, floor_rel=energy_floor, points=energy_comparisons, measure=ENERGY)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from autoresearch.ground.ranked_by import ENERGY_RANKED, RANKED_BY
from bench.stats import Comparison, DifferenceRule, compare_one, summarize

__all__ = ["ENERGY", "RULE", "TIME", "Measure", "SpeedVerdict", "judge_speed", "measure_of", "median_cost",
           "request_floor"]

RULE = DifferenceRule()  # bench's own


@dataclass(frozen=True)
class Measure:
    """The cost a study ranks by (lower is better), in the words its verdicts use."""

    name: str  # what each launch gives: "request time", "energy per request"
    better: str  # the verdict "faster" in these words
    worse: str  # the verdict "slower"
    not_shown: str  # the verdict "same": neither shown better nor worse
    ranked_by: str  # as the study and its champion record it (autoresearch.measures.request_time)

    def words(self, verdict: str) -> str:
        """A verdict as bench words it (faster, same, slower) in this measure's words."""
        return {"faster": self.better, "slower": self.worse, "same": self.not_shown}[verdict]


TIME = Measure("request time", "faster", "slower", "not shown faster", RANKED_BY)
ENERGY = Measure("energy per request", "less energy", "more energy", "not shown to use less energy", ENERGY_RANKED)


def measure_of(ranked_by: str | None) -> Measure:
    """The measure a study ranked by `ranked_by` is judged on: energy per request, else time (the geometric mean's too)."""
    return ENERGY if ranked_by == ENERGY_RANKED else TIME


@dataclass(frozen=True)
class SpeedVerdict:
    """A candidate's cost against a reference (request time, or energy per request), and every point compared."""

    verdict: str  # faster, slower or same (same: neither shown faster nor slower)
    speedup: float  # cost(reference) / cost(candidate), each the median over its launches: above 1, better
    low: float  # the speed-up's interval
    high: float
    margin: float  # the relative effect request time had to exceed
    slower_on: tuple[str, ...] = ()  # points slower beyond their floor
    launches: tuple[int, int] = (0, 0)  # (reference, candidate)
    measure: Measure = TIME

    @property
    def faster(self) -> bool:
        return self.verdict == "faster"

    @property
    def interval(self) -> tuple[float, float, float]:
        return self.speedup, self.low, self.high

    def text(self) -> str:
        """The verdict in words with its interval, e.g. "faster: request time 1.120x [1.080, 1.150]"."""
        m = self.measure
        what = m.words(self.verdict)
        where = f"; {m.worse} on {', '.join(self.slower_on)}" if self.slower_on else ""
        return (f"{what}: {m.name} {self.speedup:.3f}x [{self.low:.3f}, {self.high:.3f}] "
                f"(margin {100 * self.margin:.1f}%, {self.launches[1]} vs {self.launches[0]} launches){where}")

    def to_dict(self) -> dict:
        return {"verdict": self.verdict, "speedup": self.speedup, "interval": [self.low, self.high],
                "margin": self.margin, "slower_on": list(self.slower_on), "launches": list(self.launches),
                "measure": self.measure.ranked_by}


def request_floor(reference_times: Sequence[float], fallback: float | None = None) -> float | None:
    """Request time's launch-to-launch noise: the reference's first two launches' relative difference, else
    `fallback` (a stored floor; None: none known, and the margin is the rule's minimum effect)."""
    if len(reference_times) > 1:
        return abs(reference_times[1] / reference_times[0] - 1)
    return fallback


def median_cost(costs: Sequence[float]) -> float:
    """One side's cost as judge_speed's ratio takes it: the median over launches of the rates 1 / cost, inverted
    (with an odd number of launches, the median launch's own cost), so that
    judge_speed(a, b).speedup == median_cost(a) / median_cost(b)."""
    return 1 / summarize([1 / c for c in costs], RULE.confidence).median


def judge_speed(reference_times: Sequence[float], candidate_times: Sequence[float], *, floor_rel: float | None,
                points: Sequence[Comparison] = (), rule: DifferenceRule = RULE, measure: Measure = TIME) -> SpeedVerdict:
    """The candidate's launches against the reference's (each launch's cost: seconds, or joules with
    `measure=ENERGY`; each side at least one launch); `points`: bench's per-point comparisons of the same
    launches, on the same measure (a point worse beyond its floor makes the candidate worse)."""
    request = compare_one(measure.ranked_by, [1 / t for t in reference_times], [1 / t for t in candidate_times],
                          rule=rule, floor_rel=floor_rel)
    slower_on = tuple(c.metric for c in points if c.verdict == "slower")
    verdict = "slower" if slower_on or request.verdict == "slower" else request.verdict
    return SpeedVerdict(verdict=verdict, speedup=request.ratio, low=request.ratio_ci_low, high=request.ratio_ci_high,
                        margin=request.margin_rel, slower_on=slower_on,
                        launches=(len(reference_times), len(candidate_times)), measure=measure)
