"""A trial Ctrl-C ended is enqueued again on resume, once, with its parameters and role."""

from __future__ import annotations

import optuna
import pytest

from autoresearch.ground.study import retry_interrupted


def _study_with_interrupted_trial() -> optuna.Study:
    study = optuna.create_study(directions=["maximize", "maximize"])
    trial = study.ask({"x": optuna.distributions.IntDistribution(0, 10)})
    trial.set_user_attr("role", "candidate")
    trial.set_user_attr("interrupted_in", trial.number)  # as TrialRunner marks it on KeyboardInterrupt
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
    failed = study.ask({"x": optuna.distributions.IntDistribution(0, 10)})
    study.tell(failed, state=optuna.trial.TrialState.FAIL)  # a failure of its own: not retried here
    return study


def test_an_interrupted_trial_runs_again_once():
    """Before: a Ctrl-C'd trial stayed FAIL and its configuration was never tried again (kill -9's was)."""
    study = _study_with_interrupted_trial()
    assert retry_interrupted(study) == [0]
    waiting = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert len(waiting) == 1 and waiting[0].params == study.trials[0].params
    assert waiting[0].user_attrs["role"] == "candidate" and waiting[0].system_attrs["failed_trial"] == 0
    assert retry_interrupted(study) == []  # already retried


def test_the_trial_runner_marks_the_trial_it_was_running_when_interrupted():
    from types import SimpleNamespace

    from autoresearch.trial.runner import TrialRunner

    def interrupted(_trial):
        raise KeyboardInterrupt

    study = optuna.create_study(directions=["maximize", "maximize"])
    runner = SimpleNamespace(_run=interrupted)  # the stages: not what is tested
    with pytest.raises(KeyboardInterrupt):
        study.optimize(lambda trial: TrialRunner.__call__(runner, trial), n_trials=1)
    assert study.trials[0].user_attrs["interrupted_in"] == 0
    assert retry_interrupted(study) == [0]
