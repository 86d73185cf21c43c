"""The two objectives, read from a bench result, and the "clearly dominated" early stop.

Decode: the geometric mean over the decode ladder's points of the client-side median decode tok/s.
Prefill: the same over the prefill ladder. Client-side rates are what a user of the server sees
and exist for every OpenAI-compatible server; the server's own timings are stored beside them.
"""

from __future__ import annotations

import math

import optuna

from bench import BenchResult

__all__ = ["dominated_by", "geometric_mean", "objectives_from_bench", "speedup_score"]


def geometric_mean(values: list[float]) -> float:
    if not values or any(v <= 0 for v in values):
        return 0.0
    return math.exp(sum(math.log(v) for v in values) / len(values))


def objectives_from_bench(result: BenchResult) -> tuple[float, float]:
    headline = result.headline()
    decode = [v for k, v in headline.items() if k.startswith("decode_tok_per_s_client@")]
    prefill = [v for k, v in headline.items() if k.startswith("prefill_tok_per_s_client@")]
    return geometric_mean(decode), geometric_mean(prefill)


def speedup_score(values: tuple[float, float], baseline: tuple[float, float]) -> float:
    """One number for ranking the front: the geometric mean of the two speed-ups over the baseline."""
    if min(baseline) <= 0 or min(values) <= 0:
        return 0.0
    return math.sqrt(values[0] / baseline[0] * values[1] / baseline[1])


def _feasible(trial: optuna.trial.FrozenTrial) -> bool:
    return trial.state == optuna.trial.TrialState.COMPLETE and all(c <= 0 for c in trial.user_attrs.get("constraints", [1]))


def dominated_by(study: optuna.Study, values: tuple[float, float], *, margin_rel: float) -> int | None:
    """The number of a feasible trial faster than `values` by more than the margin on both objectives."""
    for other in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        if not _feasible(other) or other.values is None:
            continue
        if all(o > v * (1.0 + margin_rel) for o, v in zip(other.values, values, strict=True)):
            return other.number
    return None
