"""Each finalist launch's costs, and a finalist's ratios against the baseline by the decision's own estimator.

The finalists' decision (autoresearch.crown.finalists) gives each fresh launch one cost, its request time or
its joules per request on the workload, and autoresearch.measures.faster.judge_speed takes the ratio of the
two sides' geometric means over launches. RESULTS.md states both measures of every finalist, the one ranked and the
other beside it; both are read here from the same launches' records and go through judge_speed (`ratio`),
so a finalist's numbers agree with its decision. Pooling the launches first (each point's median over the
launches, then one request time) is another estimator: where launches differ, the median launch is not the
launch of the points' medians (the real 0.5B's energy study: 1.349x pooled against 1.240x per launch).

A launch counts as the decision counted it: its request time measured, and in a study ranked by energy its
joules per request too (autoresearch.crown.finalists._launch_and_bench).

Usage:
    rounds = finalist_launches(db.measurements(study=name, kind="finalist_bench"), mix, by_energy=False)
    ratio(rounds[(1, 0)].seconds, rounds[(1, 4)].seconds)     # T(baseline) / T(trial 4), a SpeedVerdict
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from autoresearch.ground.errors import Unmeasured
from autoresearch.measures.faster import TIME, Measure, SpeedVerdict, judge_speed
from autoresearch.measures.launch_stats import Reading
from autoresearch.measures.request_time import RequestMix

__all__ = ["Launches", "finalist_launches", "ratio"]


@dataclass(frozen=True)
class Launches:
    """One configuration's launches in one finalists' round that its decision counted, in launch order."""

    payloads: tuple[dict, ...]  # their stored bench records (energy.EnergyUse.of reads their joules)
    seconds: tuple[float, ...]  # each one's request time on the workload


def _counted(mix: RequestMix, payload: dict, *, by_energy: bool) -> float | None:
    """The launch's request time, or None where the decision did not count it."""
    try:
        seconds = mix.time_s(payload.get("headline") or {})
        if by_energy:
            mix.energy_j(payload.get("energy") or {})
    except Unmeasured:
        return None
    return seconds


def finalist_launches(rows: Iterable[dict], mix: RequestMix | None, *, by_energy: bool
                      ) -> dict[tuple[int, int], Launches]:
    """By (round, trial): the counted launches of the `finalist_bench` rows (ResultsDB.measurements); empty
    without a mix (nothing to time)."""
    if mix is None:
        return {}
    counted: dict[tuple[int, int], list[tuple[int, dict, float]]] = {}
    for r in rows:
        p = r["payload"]
        if (seconds := _counted(mix, p, by_energy=by_energy)) is not None:
            counted.setdefault((p["round"], p["trial"]), []).append((p.get("launch", 0), p, seconds))
    return {key: Launches(tuple(p for _, p, _ in sorted(xs, key=lambda x: x[0])),
                          tuple(s for *_, s in sorted(xs, key=lambda x: x[0])))
            for key, xs in counted.items()}


def ratio(reference: Sequence[float], candidate: Sequence[float], measure: Measure = TIME) -> SpeedVerdict | None:
    """cost(reference) / cost(candidate) as the decision takes it (judge_speed: each side's geometric mean over
    its launches), with its interval (its spread from these launches alone); None where a side has no launch.
    Only the ratio and its interval are meant here: the verdict words are the decision's, stored with it."""
    if not reference or not candidate:
        return None
    return judge_speed([Reading(c) for c in reference], [Reading(c) for c in candidate], measure=measure)
