"""The Optuna bridge: a trial samples a ServingConfig; the baseline becomes an enqueued trial.

Define-by-run with conditional knobs: a knob is suggested only when its conditions hold, always
under one name with one distribution, so TPE(multivariate=True, group=True) models the branches
jointly. Parameters are the knobs' names; "let exllamav3 decide" is stored as "default".

Usage:
    def objective(trial):
        config = sample_config(trial, space)
        ...
    study.enqueue_trial(baseline_params(space), user_attrs={"role": "baseline"}, skip_if_exists=True)
    config = config_from_params(space, study.best_trial.params)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import optuna
from optuna.distributions import BaseDistribution

from search_space.errors import SpaceError
from search_space.knobs import Knob
from search_space.space import SearchSpace
from serving.config import ServingConfig

__all__ = ["baseline_params", "config_from_params", "distributions", "sample_config", "sample_values"]


def sample_values(trial: optuna.trial.BaseTrial, space: SearchSpace) -> dict[str, Any]:
    """Suggest every knob that is active under the values suggested before it."""
    return space.walk(lambda knob, _: knob.domain.suggest(trial, knob.name))


def sample_config(trial: optuna.trial.BaseTrial, space: SearchSpace) -> ServingConfig:
    """The configuration this trial proposes (not yet checked against the VRAM budget)."""
    return space.to_config(sample_values(trial, space))


def baseline_params(space: SearchSpace, changes: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Trial parameters of the all-defaults configuration with `changes`, for `study.enqueue_trial`.

    A knob that a change activates (num_draft_tokens under draft_mode=ngram) takes its default.

    Raises:
        CatalogError: a default active in the baseline lies outside its (narrowed) domain.
        SpaceError: a change is outside its domain or does not apply (SearchSpace.values_with).
    """
    values = space.values_with(changes or {})
    return {name: space.knob(name).domain.to_param(value) for name, value in values.items()
            if name not in space.pinned}


def config_from_params(space: SearchSpace, params: Mapping[str, Any]) -> ServingConfig:
    """Rebuild the configuration of a finished trial from its `params`.

    Raises:
        SpaceError: a needed parameter is missing, outside its domain, or a parameter is not used.
    """

    def pick(knob: Knob, _: Mapping[str, Any]) -> Any:
        if knob.name not in params:
            raise SpaceError(f"trial parameters lack {knob.name!r}, which is active ({knob.describe_when()})")
        value = knob.domain.from_param(params[knob.name])
        if not knob.domain.contains(value):
            raise SpaceError(f"parameter {knob.name}={params[knob.name]!r} is outside {knob.domain.describe()}")
        return value

    values = space.walk(pick)
    unused = sorted(set(params) - set(values))
    if unused:
        raise SpaceError(f"parameter {unused[0]!r} is not an active knob of this space for these values")
    return space.to_config(values)


def distributions(space: SearchSpace, params: Mapping[str, Any] | None = None) -> dict[str, BaseDistribution]:
    """Optuna distributions of every searched knob, or of those in `params` (for `optuna.create_trial`)."""
    return {knob.name: knob.domain.to_distribution() for knob in space.searched
            if params is None or knob.name in params}
