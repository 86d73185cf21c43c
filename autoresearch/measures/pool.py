"""The baseline's pooled launches: every launch of the baseline's configuration the study holds, as readings.

Why: one launch is one draw. The real 0.5B's first baseline launch read prefill at 107K tok/s and its six later
launches at 54-67K; every candidate's search ratio was against that one launch, and n-gram drafting (+26% decode)
read 0.80x and never reached the finalists. So the search's reference is the geometric mean of every baseline
launch so far (its two launches, each drift reading, each finalists' round), and the speed verdict's spread is
pooled from the same launches (autoresearch.measures.faster): both grow as launches arrive.

Usage:
    launches = baseline_launches(study, db, study_name, ranking)     # BaselineLaunch each, in the order stored
    save_pool(study, db, study_name)        # the search's reference, after a baseline launch is stored
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import optuna

from autoresearch.ground.db import ResultsDB
from autoresearch.ground.errors import Unmeasured
from autoresearch.ground.study import baseline_trial
from autoresearch.measures.launch_stats import Reading, geometric_cost, pooled_spread
from autoresearch.measures.objectives import objective_metrics, objectives_from_bench
from autoresearch.measures.ranking import POOL_ATTR, Ranking
from bench import BenchResult, mark_stalls

__all__ = ["BaselineLaunch", "baseline_launches", "baseline_payloads", "launch_spread", "pooled_rates", "save_pool"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BaselineLaunch:
    source: str  # e.g. "baseline launch 1", "drift check before trial 7", "finalists round 1, launch 0"
    round: int | None  # the finalists' round it belongs to (None: the search's)
    rates: Mapping[str, float]  # each objective point's median (headline keys)
    objectives: tuple[float, float]  # decode and prefill, as autoresearch.measures.objectives reads them
    energy: Mapping[str, float]  # each point's tokens per joule (energy_headline keys; empty: no energy read)
    reading: Reading | None  # by the study's ranking; None where it cannot be read so (e.g. no energy)


def _records(study: optuna.Study, db: ResultsDB, study_name: str, number: int | None
             ) -> list[tuple[str, int | None, dict]]:
    if number is None:
        base = baseline_trial(study)
        if base is None:
            return []
        number = base.number
    out = [(f"baseline launch {r['launch']}", None, r["payload"])
           for r in db.measurements(study=study_name, kind="bench", trial=number)]
    out += [(f"drift check before trial {r['payload'].get('before_trial')}", None, r["payload"]["bench"])
            for r in db.measurements(study=study_name, kind="drift_bench") if r["payload"].get("bench")]
    out += [(f"finalists round {r['payload']['round']}, launch {r['payload'].get('launch', 0)}", r["payload"]["round"],
             r["payload"]) for r in db.measurements(study=study_name, kind="finalist_bench")
            if r["payload"].get("trial") == number]
    return out


def baseline_payloads(study: optuna.Study, db: ResultsDB, study_name: str) -> list[dict]:
    """Every stored bench record of the baseline's configuration (its launches, drift readings, finalists'
    rounds), in the order stored: what RESULTS.md takes the search's ratios against."""
    return [payload for _, _, payload in _records(study, db, study_name, None)]


def baseline_launches(study: optuna.Study, db: ResultsDB, study_name: str, ranking: Ranking | None = None, *,
                      baseline: int | None = None) -> list[BaselineLaunch]:
    """Every fully measured launch of the baseline's configuration in the store, in the order stored (`baseline`:
    its trial's number, while that trial still runs); a launch that left a point unmeasured is left out (said in
    the log), never read as a number."""
    ranking = ranking or Ranking.of(study)
    out = []
    for source, round_, payload in _records(study, db, study_name, baseline):
        try:
            result = mark_stalls(BenchResult.from_dict(payload))
            headline = result.headline()
            metrics = objective_metrics(result)
            missing = [m for m in metrics if not headline.get(m, 0) > 0]
            if missing:
                raise Unmeasured(f"{', '.join(missing)} not measured")
            objectives = objectives_from_bench(result)
        except (Unmeasured, KeyError, TypeError, ValueError) as exc:
            log.info("%s of the baseline does not count in its pool: %s", source, exc)
            continue
        try:
            reading = ranking.reading(result)
        except Unmeasured:
            reading = None
        out.append(BaselineLaunch(source, round_, {m: headline[m] for m in metrics}, objectives,
                                  result.energy_headline(), reading))
    return out


def pooled_rates(rates: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """Each point's geometric mean over the launches (points some launch lacks are left out)."""
    rates = list(rates)
    keys = set.intersection(*(set(r) for r in rates)) if rates else set()
    return {k: math.exp(sum(math.log(r[k]) for r in rates) / len(rates)) for k in sorted(keys)}


def launch_spread(launches: Sequence[BaselineLaunch]) -> dict[str, float]:
    """Each objective point's launch-to-launch spread over the launches: the sd of its log rate (about its
    relative sd), pooled as the verdict pools it; empty under two launches."""
    if len(launches) < 2:
        return {}
    keys = set.intersection(*(set(b.rates) for b in launches))
    return {k: pooled_spread([[math.log(b.rates[k]) for b in launches]]).sd for k in sorted(keys)}


def save_pool(study: optuna.Study, db: ResultsDB, study_name: str, *, baseline: int | None = None) -> dict:
    """Store the search's reference (autoresearch.measures.ranking.Ranking reads it): each point's rate and tokens
    per joule pooled over every baseline launch so far, how many, and their spread. Called where a launch of the
    baseline is stored: its trial, a drift check, a finalists' round."""
    ranking = Ranking.of(study)
    launches = baseline_launches(study, db, study_name, ranking, baseline=baseline)
    if not launches:
        return {}
    energy = [b.energy for b in launches if b.energy]
    costs: dict[str, float] = {}
    if ranking.mix is not None:  # each launch's cost, then their geometric mean: the verdict's own estimator
        costs["request_s"] = geometric_cost([Reading(ranking.mix.time_s(b.rates)) for b in launches])
        joules = []
        for b in energy:
            try:
                joules.append(Reading(ranking.mix.energy_j(b)))
            except Unmeasured:
                continue
        if joules:
            costs["energy_j"] = geometric_cost(joules)
    objectives = pooled_rates({"decode": b.objectives[0], "prefill": b.objectives[1]} for b in launches)
    pool = {"rates": pooled_rates(b.rates for b in launches), "energy_rates": pooled_rates(energy) if energy else {},
            "objectives": [objectives["decode"], objectives["prefill"]],
            "launches": len(launches), "energy_launches": len(energy), "spread": launch_spread(launches),
            "sources": [b.source for b in launches], **costs}
    study.set_user_attr(POOL_ATTR, pool)
    return pool
