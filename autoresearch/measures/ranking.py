"""The study's one number: what ranks "best so far", picks the finalists and names the champion.

Optuna keeps the two rates as objectives (the Pareto front, the dashboard); choosing among the front
needs one number: the request-time speed-up of autoresearch.measures.request_time, or with --rank-by energy
the energy ratio E(baseline) / E(candidate), joules per request on the same requests (the trials'
`energy_rates`, autoresearch.measures.energy). A study records which it is ranked by when it is created
(autoresearch.ground.ranked_by), and the baseline's request mix once the baseline is measured. A
study stored before request time ranked has neither: it keeps the geometric mean of the two speed-ups it was made with, so a resumed old study ranks as
it always did, and report and export say which scalar ranked it.

Each launch's cost by the study's number (`launch_cost`: seconds or joules per request), its noise
floor (`cost_floor`) and the points compared beside it (`samples`, `point_metrics`) are what
autoresearch.measures.faster judges the finalists on, one rule for both measures.

Usage:
    save_request_mix(study, RequestMix.from_bench(baseline_bench))
    ranking = Ranking.of(study); ranking.score(trial, baseline_trial)
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass

import optuna

from autoresearch.ground.errors import Unmeasured
from autoresearch.ground.ranked_by import GEOMEAN, RANKED_BY_ATTR, ranking_label
from autoresearch.ground.speeds import measured_values
from autoresearch.measures.energy import ENERGY_RATES
from autoresearch.measures.faster import ENERGY, Measure, measure_of
from autoresearch.measures.launch_stats import Reading
from autoresearch.measures.objectives import (
    PREFILL_RATE,
    decode_weights,
    geometric_mean,
    objective_metrics,
    objectives_from_bench,
    speedup_score,
)
from autoresearch.measures.request_time import RequestMix, median_headline
from bench import BenchResult, NoiseFloor
from bench.metrics import DECODE_ENERGY, PREFILL_ENERGY

__all__ = ["Ranking", "objective_rates", "save_request_mix"]

log = logging.getLogger(__name__)
_MIX = "request_mix"
RATES = "rates"  # a measured trial's user attr: the objective points' medians, as BenchResult.headline() keys them
REQUEST_SPEEDUP = "request_speedup"  # a measured trial's user attr (the dashboard shows it)
POOL_ATTR = "baseline_pool"  # the study's: every baseline launch's rates pooled (autoresearch.measures.pool.save_pool)


def save_request_mix(study: optuna.Study, mix: RequestMix) -> None:
    study.set_user_attr(_MIX, mix.to_dict())


def objective_rates(result: BenchResult) -> dict[str, float]:
    """The medians the objectives and request time read (every point measured: objectives_from_bench ran)."""
    headline = result.headline()
    return {k: headline[k] for k in objective_metrics(result)}


@dataclass(frozen=True)
class Ranking:
    ranked_by: str  # request_time.RANKED_BY, ENERGY_RANKED or GEOMEAN
    mix: RequestMix | None  # None before the baseline is measured, and in a study ranked by the geometric mean
    pool: Mapping | None = None  # every baseline launch's rates pooled: the search's reference (None: its first launch)

    @classmethod
    def of(cls, study: optuna.Study) -> Ranking:
        ranked_by = study.user_attrs.get(RANKED_BY_ATTR) or GEOMEAN
        stored = study.user_attrs.get(_MIX)
        mix = RequestMix.from_dict(stored) if stored and ranked_by != GEOMEAN else None
        return cls(ranked_by, mix, study.user_attrs.get(POOL_ATTR))

    def reference(self, baseline: optuna.trial.FrozenTrial, attr: str = RATES) -> Mapping[str, float] | None:
        """The baseline's rates every search ratio is taken against: pooled over every launch of it the study holds
        (RESULTS.md and the dashboard say how many), else its first launch's (a study stored before the pool)."""
        pooled = (self.pool or {}).get("energy_rates" if attr == ENERGY_RATES else "rates")
        return pooled or baseline.user_attrs.get(attr)

    @property
    def reference_launches(self) -> int:
        return int((self.pool or {}).get("launches") or 1)

    @property
    def label(self) -> str:
        return ranking_label(self.ranked_by)

    @property
    def measure(self) -> Measure:
        """The cost autoresearch.measures.faster judges on: energy per request, else time (the geometric mean's too)."""
        return measure_of(self.ranked_by)

    def score(self, trial: optuna.trial.FrozenTrial, baseline: optuna.trial.FrozenTrial) -> float:
        """The trial's gain over the baseline by this study's scalar (search measurements): its request-time
        speed-up, or its energy ratio E(baseline) / E(trial). Above 1: better."""
        if self.ranked_by == GEOMEAN:
            return speedup_score(measured_values(trial), measured_values(baseline))
        if self.mix is None:
            raise Unmeasured("no request mix stored yet: the baseline has not been measured")
        attr = ENERGY_RATES if self.measure is ENERGY else RATES
        reference = self.reference(baseline, attr)
        missing = [t.number for t, r in ((baseline, reference), (trial, trial.user_attrs.get(attr))) if not r]
        if missing:
            what = "no energy reading" if attr == ENERGY_RATES else "no rates (a worker of an older version ran it)"
            raise Unmeasured(f"trial {missing[0]} stored {what}")
        return self.reference_cost(baseline) / self._cost(trial.user_attrs[attr])

    def reference_cost(self, baseline: optuna.trial.FrozenTrial) -> float:
        """The baseline's cost every search ratio is taken against: the geometric mean of each of its launches'
        costs (the verdict's estimator), else of its pooled rates, else of its first launch."""
        pooled = (self.pool or {}).get("energy_j" if self.measure is ENERGY else "request_s")
        return pooled or self._cost(self.reference(baseline, ENERGY_RATES if self.measure is ENERGY else RATES))



    def _cost(self, headline: Mapping[str, float]) -> float:
        """Per request on the mix: seconds on rates, or joules on tokens per joule (Unmeasured: a point lacks it)."""
        return self.mix.energy_j(headline) if self.measure is ENERGY else self.mix.time_s(headline)

    def samples(self, result: BenchResult) -> dict[str, tuple[float, ...]]:
        """The per-run values the points are compared on: tokens per joule, or the rates."""
        return result.energy_samples() if self.measure is ENERGY else result.samples()

    def point_metrics(self, result: BenchResult) -> list[str]:
        """Every planned point's key in `samples` (the objectives' points; their energy keys by energy)."""
        if self.measure is ENERGY:
            return [str(p.metric(PREFILL_ENERGY)) for p in result.prefill] + \
                [str(d.metric(DECODE_ENERGY)) for d in result.decode]
        return objective_metrics(result)

    def launch_cost(self, result: BenchResult) -> float:
        """One launch's cost by the study's number: the workload's mean request time, its joules per request
        (Unmeasured: a point has no energy reading; never 0), or without a mix (a study ranked by the
        geometric mean) 1 / sqrt(decode x prefill), whose ratio is that mean."""
        if self.mix is None:
            decode, prefill = objectives_from_bench(result)
            return 1 / math.sqrt(decode * prefill)
        return self._cost(result.energy_headline() if self.measure is ENERGY else result.headline())

    def reading(self, result: BenchResult) -> Reading:
        """One launch as the speed verdict reads it: its cost (launch_cost) and each planned point's median
        (rates, or tokens per joule by energy). Raises Unmeasured where a point or its energy is missing."""
        headline = result.energy_headline() if self.measure is ENERGY else result.headline()
        wanted = self.point_metrics(result)
        missing = [m for m in wanted if not headline.get(m, 0) > 0]
        if missing:
            raise Unmeasured(f"{', '.join(missing)} not measured in this launch")
        return Reading(cost=self.launch_cost(result), points={m: headline[m] for m in wanted})

    def cost_floor(self, floor: NoiseFloor, baseline: list[BenchResult]) -> float:
        """The launch cost's noise floor from the points' (every compared point present in `floor`): how much
        more the baseline's median launch costs with every point worse by its floor at once."""
        if self.mix is None:  # 1 / sqrt(decode x prefill), each objective a (weighted) geometric mean of its points
            weights = decode_weights(baseline[0])
            decode = geometric_mean((1 + floor.of(m) for m in weights), weights.values())
            prefill = geometric_mean(1 + floor.of(str(p.metric(PREFILL_RATE))) for p in baseline[0].prefill)
            return math.sqrt(decode * prefill) - 1
        energy = self.measure is ENERGY
        headline = median_headline(r.energy_headline() if energy else r.headline() for r in baseline)
        return self._cost({k: v / (1 + (floor.of(k) or 0.0)) for k, v in headline.items()}) / self._cost(headline) - 1

    def rank(self, trials: list[optuna.trial.FrozenTrial], baseline: optuna.trial.FrozenTrial
             ) -> list[tuple[float, optuna.trial.FrozenTrial]]:
        """(score, trial), best first; ties keep the trials' order. A trial that cannot be scored is left
        out, with a warning that says why."""
        scored = []
        for t in trials:
            try:
                scored.append((self.score(t, baseline), t))
            except Unmeasured as exc:
                log.warning("trial %d is not ranked: %s", t.number, exc)
        return sorted(scored, key=lambda st: -st[0])
