"""The two objectives, read from a bench result, and the "clearly dominated" early stop.

Decode: the weighted geometric mean, over the decode ladder's points, of each point's median
client-side decode rate: what a user of the server sees, token after token. A point's weight is its
kind's share of the workload (bench.Workload: a suite's tasksets, weighted as the suite weights
them), split equally among the decode contexts; without a workload every point weighs the same.
Prefill: the same over the prefill ladder, of the server-timed prefill rate (uncached prompt
tokens over the engine's own prefill time). The client's time adds a fixed ~70 ms of HTTP,
templating and tokenizing that no knob changes; on a small fast model (a 0.5B prefills 8K tokens
in about 70 ms) it doubled the time and made fresh launches of one configuration differ by ±30%,
so finalists could not be told apart. The client-side rates are stored beside it.

Every point of the plan must be measured: a point without a valid run makes the whole result
Unmeasured, with the runs' reasons. A mean over the points that happened to work would rank a
candidate by its fast half.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable

import optuna

from autoresearch.ground.errors import Unmeasured
from autoresearch.ground.study import passed_speeds
from bench import BenchResult
from bench.metrics import DECODE_ENERGY, PREFILL_ENERGY, Metric

__all__ = [
    "DECODE_RATE",
    "NOT_MEASURED",
    "PREFILL_RATE",
    "decode_weights",
    "dominated_by",
    "energy_objectives",
    "geometric_mean",
    "objective_metrics",
    "objectives_from_bench",
    "speedup_score",
]

DECODE_RATE = "decode_tok_per_s_client"
PREFILL_RATE = "prefill_tok_per_s_server"
# Optuna needs values for a COMPLETE trial. One that measured nothing (infeasible, crashed,
# unmeasured) carries these: no speed can be mistaken for them, and samplers rank such trials by
# their violated constraints, never by these values.
NOT_MEASURED = (-math.inf, -math.inf)
_TOO_SHORT = "too short to time decode"  # bench.validity's reason for an answer that ended too soon


def geometric_mean(values: Iterable[float], weights: Iterable[float] | None = None) -> float:
    values = list(values)
    weights = [1.0] * len(values) if weights is None else list(weights)
    if not values or any(not v > 0 for v in values):
        raise ValueError(f"a geometric mean needs positive values, got {values}")
    if len(weights) != len(values) or any(not w > 0 for w in weights):
        raise ValueError(f"a weighted geometric mean needs one positive weight per value, got {weights}")
    return math.exp(sum(w * math.log(v) for v, w in zip(values, weights, strict=True)) / sum(weights))


def decode_weights(result: BenchResult) -> dict[str, float]:
    """Each decode sample key's weight in the decode objective: its kind's workload share (equal weights
    without a workload). A kind the workload does not weigh is an error, not a weight of its own: a
    share of 1.0 beside shares that sum to 1 would outweigh every other kind."""
    workload = result.plan.get("workload")
    if not workload:
        return {str(d.metric(DECODE_RATE)): 1.0 for d in result.decode}
    shares = workload["weights"]
    missing = sorted({d.kind for d in result.decode} - set(shares))
    if missing:
        raise ValueError(f"decode kind(s) {', '.join(missing)} are not in the bench plan's workload "
                         f"(weights for {', '.join(sorted(shares))}): the result does not match its plan")
    return {str(d.metric(DECODE_RATE)): shares[d.kind] for d in result.decode}


def objective_metrics(result: BenchResult) -> list[str]:
    """The sample keys the objectives read (as in BenchResult.samples()), one per planned point."""
    return _prefill_metrics(result) + _decode_metrics(result)


def _prefill_metrics(result: BenchResult) -> list[str]:
    return [str(p.metric(PREFILL_RATE)) for p in result.prefill]


def _decode_metrics(result: BenchResult) -> list[str]:
    return [str(d.metric(DECODE_RATE)) for d in result.decode]


def objectives_from_bench(result: BenchResult) -> tuple[float, float]:
    """(decode, prefill) tok/s. Raises Unmeasured, naming each point and why its runs were set aside."""
    medians = result.headline()
    missing = [m for m in objective_metrics(result) if m not in medians]
    if missing:
        points = {p.key: p for p in (*result.prefill, *result.decode)}
        raise Unmeasured("; ".join(_why(metric, points) for metric in missing))
    weights = decode_weights(result)
    decode = _decode_metrics(result)
    return (geometric_mean((medians[m] for m in decode), (weights[m] for m in decode)),
            geometric_mean(medians[m] for m in _prefill_metrics(result)))


def energy_objectives(result: BenchResult) -> tuple[float, float]:
    """(decode, prefill) tokens per joule, each point weighted as the rates are: what a minimization ranked by
    energy compares beside joules per request. Raises Unmeasured naming each point without an energy
    reading (never 0)."""
    medians = result.energy_headline()
    weights = decode_weights(result)
    decode = {str(d.metric(DECODE_ENERGY)): weights[str(d.metric(DECODE_RATE))] for d in result.decode}
    prefill = [str(p.metric(PREFILL_ENERGY)) for p in result.prefill]
    missing = [m for m in (*decode, *prefill) if m not in medians]
    if missing:
        raise Unmeasured(f"no energy reading at {', '.join(missing)}")
    return (geometric_mean((medians[m] for m in decode), decode.values()),
            geometric_mean(medians[m] for m in prefill))


def _why(key: str, points: dict) -> str:
    metric = Metric.parse(key)
    point = points[metric.point]
    reasons = Counter(point.invalid_reasons)
    if not point.runs:
        detail = "no run"
    elif reasons:
        detail = "; ".join(f"{n}x {reason}" for reason, n in reasons.most_common(3))
    else:
        detail = f"the server reported no {'client' if metric.client_timed else 'server'}-side timing"
    hint = ("; the model's answers here are too short to time: measure decode on longer ones (--bench-workload "
            "corpus, or a workload FILE) or to a fixed length (--bench-decode-until length)"
            if any(_TOO_SHORT in reason for reason in reasons) else "")
    return f"{key}: {len(point.valid_runs)} valid of {len(point.runs)} runs ({detail}){hint}"


def speedup_score(values: tuple[float, float], baseline: tuple[float, float]) -> float:
    """The geometric mean of the two speed-ups over the baseline: the one number of studies stored before
    request time ranked (autoresearch.measures.ranking), still read for them."""
    if not (min(values) > 0 and min(baseline) > 0 and math.isfinite(sum(values) + sum(baseline))):
        raise ValueError(f"a speed-up needs measured speeds, got {values} against {baseline}")
    return math.sqrt(values[0] / baseline[0] * values[1] / baseline[1])


def dominated_by(study: optuna.Study, values: tuple[float, float], *, margin_rel: float) -> int | None:
    """The number of a feasible trial faster than `values` by more than the margin on both objectives."""
    for other in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        measured = passed_speeds(other)
        if measured is None:
            continue
        if all(o > v * (1.0 + margin_rel) for o, v in zip(measured, values, strict=True)):
            return other.number
    return None
