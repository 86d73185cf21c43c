"""The study's one number: what ranks "best so far", picks the finalists and names the champion.

Optuna keeps the two rates as objectives (the Pareto front, the dashboard); choosing among the front
needs one number: the request-time speed-up of autoresearch.request_time, or with --rank-by energy
the energy ratio E(baseline) / E(candidate), joules per request on the same requests (the trials'
`energy_rates`, autoresearch.energy). A study records which it is ranked by when it is created
(`ranked_by`, with the words in `ranking`, which optuna-dashboard shows among the study's user
attributes), and the baseline's request mix once the baseline is measured; a resumed study that
measured a trial refuses another --rank-by. A study stored before request time ranked has neither:
it keeps the geometric mean of the two speed-ups it was made with, so a resumed old study ranks as
it always did, and report and export say which scalar ranked it.

Each launch's cost by the study's number (`launch_cost`: seconds or joules per request), its noise
floor (`cost_floor`) and the points compared beside it (`samples`, `point_metrics`) are what
autoresearch.faster judges the finalists on, one rule for both measures.

Usage:
    settle_ranked_by(study, "energy", new=True)       # a new study (PlanError: a resumed one ranked otherwise)
    save_request_mix(study, RequestMix.from_bench(baseline_bench))
    ranking = Ranking.of(study); ranking.score(trial, baseline_trial)
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass

import optuna

from autoresearch.energy import ENERGY_RATES
from autoresearch.errors import PlanError, Unmeasured
from autoresearch.faster import ENERGY, TIME, Measure
from autoresearch.objectives import (
    PREFILL_RATE,
    decode_weights,
    geometric_mean,
    objective_metrics,
    objectives_from_bench,
    speedup_score,
)
from autoresearch.request_time import (
    ENERGY_RANKED,
    GEOMEAN,
    RANKED_BY,
    RequestMix,
    median_headline,
    ranking_label,
)
from bench import BenchResult, NoiseFloor
from bench.metrics import DECODE_ENERGY, PREFILL_ENERGY

__all__ = ["RANK_BY", "Ranking", "mark_ranked_by_request_time", "objective_rates", "save_request_mix",
           "settle_ranked_by"]

log = logging.getLogger(__name__)
RANK_BY = {"time": RANKED_BY, "energy": ENERGY_RANKED}  # --rank-by's choices, as a study records them
_RANKED_BY = "ranked_by"
_LABEL = "ranking"  # the words, for optuna-dashboard's study user attributes
_MIX = "request_mix"
RATES = "rates"  # a measured trial's user attr: the objective points' medians, as BenchResult.headline() keys them
REQUEST_SPEEDUP = "request_speedup"  # a measured trial's user attr (the dashboard shows it)


def mark_ranked_by_request_time(study: optuna.Study) -> None:
    study.set_user_attr(_RANKED_BY, RANKED_BY)


def settle_ranked_by(study: optuna.Study, rank_by: str, *, new: bool) -> None:
    """A new study (or one that completed no trial yet) records what ranks it; a resumed one that measured
    a trial keeps what it was ranked by, and another --rank-by is refused (PlanError, one line). A study
    stored before request time ranked (no `ranked_by`) counts as ranked by time."""
    stored = study.user_attrs.get(_RANKED_BY)
    measured = bool(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))
    if new or (stored is not None and not measured):
        study.set_user_attr(_RANKED_BY, RANK_BY[rank_by])
        study.set_user_attr(_LABEL, ranking_label(RANK_BY[rank_by]))
        return
    have = "energy" if stored == ENERGY_RANKED else "time"
    if have != rank_by:
        raise PlanError(f"--rank-by: study {study.study_name} was ranked by {have}, this run gives {rank_by}; "
                        "resume with the stored value, or start afresh with --study NEW")


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

    @classmethod
    def of(cls, study: optuna.Study) -> Ranking:
        ranked_by = study.user_attrs.get(_RANKED_BY) or GEOMEAN
        stored = study.user_attrs.get(_MIX)
        mix = RequestMix.from_dict(stored) if stored and ranked_by != GEOMEAN else None
        return cls(ranked_by, mix)

    @property
    def label(self) -> str:
        return ranking_label(self.ranked_by)

    @property
    def measure(self) -> Measure:
        """The cost autoresearch.faster judges on: energy per request, else time (the geometric mean's too)."""
        return ENERGY if self.ranked_by == ENERGY_RANKED else TIME

    def score(self, trial: optuna.trial.FrozenTrial, baseline: optuna.trial.FrozenTrial) -> float:
        """The trial's gain over the baseline by this study's scalar (search measurements): its request-time
        speed-up, or its energy ratio E(baseline) / E(trial). Above 1: better."""
        if self.ranked_by == GEOMEAN:
            return speedup_score(tuple(trial.values), tuple(baseline.values))
        if self.mix is None:
            raise Unmeasured("no request mix stored yet: the baseline has not been measured")
        attr = ENERGY_RATES if self.measure is ENERGY else RATES
        missing = [t.number for t in (baseline, trial) if not t.user_attrs.get(attr)]
        if missing:
            what = "no energy reading" if attr == ENERGY_RATES else "no rates (a worker of an older version ran it)"
            raise Unmeasured(f"trial {missing[0]} stored {what}")
        return self._cost(baseline.user_attrs[attr]) / self._cost(trial.user_attrs[attr])

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
