"""The speed verdict's error rates at a study's own noise, by simulation: how often a configuration equal to the
baseline would be crowned, and how often a real 1.10x or 1.20x would be.

Why: a verdict is only as good as its error rates, and they depend on the noise (launch-to-launch spread of each
point), the workload (how much each point weighs in request time) and the launches a round may take. So they are
measured the way the task tier states its power: draw launches like the study's, run the project's own round
(autoresearch.measures.faster.sequential_round) many times, count. RESULTS.md states them under the champion.

The study's noise: each point's log rate spreads between launches of one configuration as the baseline's launches
(every one the study holds) spread, pooled (autoresearch.measures.faster.pooled_spread); points are drawn
independently, log-normal around the baseline's geometric mean, and a launch's cost is the workload's request
time (or energy) on its drawn rates. A planted speed-up multiplies every point's rate (uniform).

Usage:
    noise = LaunchNoise.of(baseline_readings, cost=mix.time_s)
    rates = error_rates(noise, finalists=2, history=2, rule=VerdictRule(), rounds=400)
    rates.false_crown, rates.power[1.10], rates.text()
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from autoresearch.measures.faster import RULE, VerdictRule
from autoresearch.measures.finalist_round import sequential_round
from autoresearch.measures.launch_stats import Reading, pooled_spread

__all__ = ["Draw", "ErrorRates", "LaunchNoise", "crown_rates", "error_rates"]

Draw = Callable[[str, random.Random], Reading]  # (configuration, rng) -> one launch's reading
SPEEDUPS = (1.10, 1.20)


@dataclass(frozen=True)
class LaunchNoise:
    """Launches of one configuration: each point's typical rate and launch-to-launch sd of its log; `cost` turns a
    launch's rates into its cost on the workload (seconds or joules per request)."""

    rates: Mapping[str, float]
    log_sd: Mapping[str, float]
    cost: Callable[[Mapping[str, float]], float]
    launches: int  # how many launches the spread was pooled from

    @classmethod
    def of(cls, readings: Sequence[Reading], cost: Callable[[Mapping[str, float]], float]) -> LaunchNoise | None:
        """From a configuration's readings (at least two); None where fewer, or a point was not in every one."""
        if len(readings) < 2:
            return None
        points = set.intersection(*(set(r.points) for r in readings))
        if not points:
            return None
        rates, sd = {}, {}
        for m in sorted(points):
            logs = [math.log(r.points[m]) for r in readings]
            rates[m] = math.exp(sum(logs) / len(logs))
            sd[m] = pooled_spread([logs]).sd
        return cls(rates, sd, cost, len(readings))

    def draw(self, gains: Mapping[str, Mapping[str, float]] | None = None) -> Draw:
        """A launch drawer: configuration -> rates drawn around `rates` x its gain per point (default 1)."""
        gains = gains or {}

        def one(config: str, rng: random.Random) -> Reading:
            g = gains.get(config, {})
            points = {m: v * g.get(m, 1.0) * math.exp(rng.gauss(0.0, self.log_sd[m])) for m, v in self.rates.items()}
            return Reading(cost=self.cost(points), points=points)
        return one

    def uniform(self, speedup: float) -> dict[str, float]:
        return dict.fromkeys(self.rates, speedup)


@dataclass(frozen=True)
class Outcome:
    crowned: float  # share of rounds in which this candidate's verdict was faster
    vetoed: float  # share in which a point vetoed it
    launches: float  # its mean launches


def crown_rates(draw: Draw, candidates: Sequence[str], *, history: int, rule: VerdictRule = RULE, rounds: int,
                seed: int = 0, champion_only: bool = True) -> dict[str, Outcome]:
    """Run the project's round `rounds` times on launches from `draw` ("baseline" is the reference; `history`
    earlier baseline launches pool the spread). With `champion_only`, a candidate counts as crowned only where it
    is the faster verdict with the best speed-up (as the finalists' stage crowns)."""
    rng = random.Random(seed)
    crowned = dict.fromkeys(candidates, 0)
    vetoed = dict.fromkeys(candidates, 0)
    launched = dict.fromkeys(candidates, 0)
    for _ in range(rounds):
        past = [draw("baseline", rng) for _ in range(history)]
        result = sequential_round(lambda name, _i: draw(name, rng), candidates, history=past, rule=rule)
        faster = [c for c, v in result.verdicts.items() if v.faster]
        if champion_only and faster:
            faster = [max(faster, key=lambda c: result.verdicts[c].speedup)]
        for c in candidates:
            crowned[c] += c in faster
            vetoed[c] += bool(result.verdicts[c].slower_on)
            launched[c] += len(result.launches[c])
    return {c: Outcome(crowned[c] / rounds, vetoed[c] / rounds, launched[c] / rounds) for c in candidates}


@dataclass(frozen=True)
class ErrorRates:
    """The verdict's error rates at one noise: A/A crowns and the power at planted uniform speed-ups."""

    false_crown: float  # a finalist equal to the baseline crowned (any of the finalists)
    power: Mapping[float, float]  # planted uniform speed-up -> share of rounds crowning it
    finalists: int
    history: int
    rounds: int
    rule: VerdictRule
    launches: int  # the launches of the baseline the noise was measured on
    log_sd: Mapping[str, float]

    def text(self) -> str:
        power = ", ".join(f"{s:.2f}x in {100 * p:.0f}%" for s, p in sorted(self.power.items()))
        return (f"at this study's noise ({self.launches} baseline launches), a configuration equal to the baseline "
                f"would be crowned in {100 * self.false_crown:.1f}% of rounds with {self.finalists} finalist(s); a "
                f"real uniform speed-up is confirmed: {power} (simulated, {self.rounds} rounds, "
                f"{self.rule.min_launches}-{self.rule.max_launches} launches a side)")

    def to_dict(self) -> dict:
        return {"false_crown": self.false_crown, "power": {f"{k:g}": v for k, v in self.power.items()},
                "finalists": self.finalists, "history": self.history, "rounds": self.rounds,
                "rule": self.rule.to_dict(), "launches": self.launches, "log_sd": dict(self.log_sd)}

    @classmethod
    def from_dict(cls, d: dict) -> ErrorRates:
        return cls(false_crown=d["false_crown"], power={float(k): v for k, v in d["power"].items()},
                   finalists=d["finalists"], history=d["history"], rounds=d["rounds"],
                   rule=VerdictRule.from_dict(d["rule"]), launches=d["launches"], log_sd=d["log_sd"])


def error_rates(noise: LaunchNoise, *, finalists: int, history: int, rule: VerdictRule = RULE, rounds: int = 300,
                seed: int = 0, speedups: Sequence[float] = SPEEDUPS) -> ErrorRates:
    """A/A: `finalists` candidates equal to the baseline, any crowned; power: one candidate at each uniform
    speed-up beside `finalists - 1` equal to the baseline, it crowned."""
    names = [f"finalist {i + 1}" for i in range(max(finalists, 1))]
    aa = crown_rates(noise.draw(), names, history=history, rule=rule, rounds=rounds, seed=seed)
    power = {}
    for s in speedups:
        got = crown_rates(noise.draw({names[0]: noise.uniform(s)}), names, history=history, rule=rule,
                          rounds=rounds, seed=seed + 1)
        power[s] = got[names[0]].crowned
    return ErrorRates(false_crown=sum(o.crowned for o in aa.values()), power=power, finalists=len(names),
                      history=history, rounds=rounds, rule=rule, launches=noise.launches,
                      log_sd=dict(noise.log_sd))
