"""The study's one number: what ranks "best so far", picks the finalists and names the champion.

Optuna keeps the two rates as objectives (the Pareto front, the dashboard); choosing among the front
needs one number, and it is the request-time speed-up of autoresearch.request_time. A study records
which scalar it is ranked by when it is created (`ranked_by`), and the baseline's request mix once
the baseline is measured. A study stored before request time ranked has neither: it keeps the
geometric mean of the two speed-ups it was made with, so a resumed old study ranks as it always did,
and report and export say which scalar ranked it.

Usage:
    mark_ranked_by_request_time(study)                 # a new study
    save_request_mix(study, RequestMix.from_bench(baseline_bench))
    ranking = Ranking.of(study); ranking.score(trial, baseline_trial)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import optuna

from autoresearch.errors import Unmeasured
from autoresearch.objectives import objective_metrics, speedup_score
from autoresearch.request_time import GEOMEAN, RANKED_BY, RequestMix, ranking_label
from bench import BenchResult

__all__ = ["Ranking", "mark_ranked_by_request_time", "objective_rates", "save_request_mix"]

log = logging.getLogger(__name__)
_RANKED_BY = "ranked_by"
_MIX = "request_mix"
RATES = "rates"  # a measured trial's user attr: the objective points' medians, as BenchResult.headline() keys them
REQUEST_SPEEDUP = "request_speedup"  # a measured trial's user attr (the dashboard shows it)


def mark_ranked_by_request_time(study: optuna.Study) -> None:
    study.set_user_attr(_RANKED_BY, RANKED_BY)


def save_request_mix(study: optuna.Study, mix: RequestMix) -> None:
    study.set_user_attr(_MIX, mix.to_dict())


def objective_rates(result: BenchResult) -> dict[str, float]:
    """The medians the objectives and request time read (every point measured: objectives_from_bench ran)."""
    headline = result.headline()
    return {k: headline[k] for k in objective_metrics(result)}


@dataclass(frozen=True)
class Ranking:
    ranked_by: str  # request_time.RANKED_BY or GEOMEAN
    mix: RequestMix | None  # None before the baseline is measured, and in a study ranked by the geometric mean

    @classmethod
    def of(cls, study: optuna.Study) -> Ranking:
        ranked_by = study.user_attrs.get(_RANKED_BY) or GEOMEAN
        stored = study.user_attrs.get(_MIX)
        mix = RequestMix.from_dict(stored) if stored and ranked_by == RANKED_BY else None
        return cls(ranked_by, mix)

    @property
    def label(self) -> str:
        return ranking_label(self.ranked_by)

    def score(self, trial: optuna.trial.FrozenTrial, baseline: optuna.trial.FrozenTrial) -> float:
        """The trial's speed-up over the baseline by this study's scalar (search measurements)."""
        if self.ranked_by == GEOMEAN:
            return speedup_score(tuple(trial.values), tuple(baseline.values))
        if self.mix is None:
            raise Unmeasured("no request mix stored yet: the baseline has not been measured")
        missing = [t.number for t in (baseline, trial) if RATES not in t.user_attrs]
        if missing:
            raise Unmeasured(f"trial {missing[0]} stored no rates (a worker of an older version ran it)")
        return self.mix.speedup(baseline.user_attrs[RATES], trial.user_attrs[RATES])

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
