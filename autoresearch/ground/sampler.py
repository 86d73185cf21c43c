"""TPE that learns a pending trial's measured speeds, which Optuna's values cannot carry.

A trial through fidelity whose task tier is pending stores NOT_MEASURED as values (autoresearch.ground.speeds:
otherwise optuna-dashboard would name it "Best Trial"). Plain TPE would then rank the likely champions of the
night below every measured trial and steer the search away from them. This sampler hands TPE a view of the
study in which each pending trial carries its measured speeds as values; everything else (rejected trials by
their violations, passed trials by their values) is as TPE reads it. Optuna is pinned (5.0.0): TPE reads trials
through `study._get_trials` only, which tests/autoresearch/test_pending.py holds.
"""

from __future__ import annotations

import copy
from typing import Any

import optuna

from autoresearch.ground.speeds import speeds
from autoresearch.ground.study import tasks_pending

__all__ = ["GateSampler", "with_pending_speeds"]


class GateSampler(optuna.samplers.TPESampler):
    """optuna.samplers.TPESampler, reading a pending trial by its measured speeds."""

    def sample_relative(self, study: optuna.Study, trial: optuna.trial.FrozenTrial,
                        search_space: dict[str, Any]) -> dict[str, Any]:
        return super().sample_relative(_SpeedsView(study), trial, search_space)

    def sample_independent(self, study: optuna.Study, trial: optuna.trial.FrozenTrial, param_name: str,
                           param_distribution: optuna.distributions.BaseDistribution) -> Any:
        return super().sample_independent(_SpeedsView(study), trial, param_name, param_distribution)


def with_pending_speeds(trial: optuna.trial.FrozenTrial) -> optuna.trial.FrozenTrial:
    """The trial as TPE should read it: a pending one with its measured speeds as values (a copy)."""
    measured = speeds(trial) if tasks_pending(trial) else None
    if measured is None:
        return trial
    seen = copy.copy(trial)
    seen.values = list(measured)
    return seen


class _SpeedsView:
    """The study, but its trials read through with_pending_speeds."""

    def __init__(self, study: optuna.Study):
        self._study = study

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def _get_trials(self, *args, **kwargs) -> list[optuna.trial.FrozenTrial]:
        return [with_pending_speeds(t) for t in self._study._get_trials(*args, **kwargs)]
