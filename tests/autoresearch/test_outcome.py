"""One classification of how a trial ended: every outcome the loop writes is a TrialOutcome, and the
report reads it from there."""

from __future__ import annotations

import optuna
import pytest

import serving.errors
from autoresearch.ground.outcome import TrialOutcome
from autoresearch.report.snapshot import _stopped


def _launch_errors(cls=serving.errors.LaunchError):
    for sub in cls.__subclasses__():
        yield sub
        yield from _launch_errors(sub)


@pytest.mark.parametrize("error", [serving.errors.LaunchError, *_launch_errors()])
def test_every_launch_failure_is_an_outcome(error):
    assert TrialOutcome(error.reason).rejected


def test_outcomes_read_back_from_a_trial_and_old_values_still_parse():
    trial = optuna.trial.create_trial(values=[1.0, 1.0], user_attrs={"outcome": "gate_failed_tasks"})
    assert TrialOutcome.of(trial) is TrialOutcome.GATE_FAILED_TASKS == TrialOutcome.gate_failed("tasks")
    assert TrialOutcome.of(optuna.trial.create_trial(values=[1.0, 1.0])) is None
    assert not TrialOutcome.PASSED.rejected and not TrialOutcome.BASELINE.rejected
    assert TrialOutcome.DOMINATED.rejected and TrialOutcome.DUPLICATE.rejected


@pytest.mark.parametrize("outcome", [o for o in TrialOutcome if o not in (TrialOutcome.BASELINE, TrialOutcome.DUPLICATE)])
def test_a_baseline_that_ended_in_any_failure_stops_the_report_with_its_reason(outcome):
    failed = optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL,
                                       user_attrs={"role": "baseline", "outcome": outcome.value,
                                                   "reasons": [f"why: {outcome.value}"]})
    assert _stopped([failed], None) == f"why: {outcome.value}"
