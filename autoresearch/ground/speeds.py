"""A trial's measured speeds, wherever its verdict lets Optuna store them, and the front of what passed so far.

Optuna's values are what optuna-dashboard 0.21 ranks its "Best Trial" by: the Pareto front of every COMPLETE
trial's values, constraints ignored. So only a trial the gate passed whole keeps its speeds there; a rejected
one and one whose task tier is still pending store NOT_MEASURED (-inf) as values and their speeds in the user
attrs `decode_tok_per_s` / `prefill_tok_per_s`, set for every measured trial. The loop reads speeds here, never
`trial.values`, so a pending trial is still the likely champion to the finalists' stage, the early stop and TPE
(autoresearch.ground.study.GateSampler), while the dashboard names only what passed.

Usage:
    speeds(trial)           # (decode, prefill) tok/s, or None: nothing measured
    measured_values(trial)  # the same, or ValueError naming the trial
"""

from __future__ import annotations

import math

import optuna

__all__ = ["SPEED_ATTRS", "measured_values", "speeds"]

SPEED_ATTRS = ("decode_tok_per_s", "prefill_tok_per_s")  # every measured trial's user attrs


def speeds(trial: optuna.trial.FrozenTrial) -> tuple[float, float] | None:
    """(decode, prefill) tok/s as measured: the values of a passed trial, else its user attrs; None unmeasured."""
    if trial.values and all(math.isfinite(v) and v > 0 for v in trial.values):
        return trial.values[0], trial.values[1]
    decode, prefill = (trial.user_attrs.get(k) for k in SPEED_ATTRS)
    return (decode, prefill) if decode and prefill else None


def measured_values(trial: optuna.trial.FrozenTrial) -> tuple[float, float]:
    """speeds() of a trial that must have them (a passed or pending one); ValueError names the trial otherwise."""
    found = speeds(trial)
    if found is None:
        raise ValueError(f"trial {trial.number} stored no speeds (decode_tok_per_s, prefill_tok_per_s)")
    return found
