"""A trial records only the constraints it measured; feasible means every one recorded and satisfied."""

from __future__ import annotations

from types import SimpleNamespace

import optuna
import pytest

from autoresearch.ground.outcome import TrialOutcome
from autoresearch.ground.study import CONSTRAINTS, OK, VIOLATED, constraints_of, feasible
from autoresearch.trial.record import TrialRecord
from autoresearch.trial.runner import TrialRunner
from eval.decision import GateDecision
from eval.gate import GateRecord


def _finished(close, state=optuna.trial.TrialState.COMPLETE) -> optuna.trial.FrozenTrial:
    """A real Optuna trial, closed by `close(record)` and told `state` (the sampler stores its constraints)."""
    study = optuna.create_study(directions=["maximize", "maximize"],
                                sampler=optuna.samplers.TPESampler(constraints_func=constraints_of))
    trial = study.ask()
    close(TrialRecord(trial))
    study.tell(trial, [1.0, 2.0] if state == optuna.trial.TrialState.COMPLETE else None, state=state)
    return study.trials[0]


def test_a_duplicate_records_no_constraint_it_never_measured():
    """Before: a duplicate stored all five constraints as violated (fits too: it was never checked)."""
    def duplicate(record):
        record.reasons.append("same configuration as trial 3")
        record.end(TrialOutcome.DUPLICATE)
        record.close()

    trial = _finished(duplicate, optuna.trial.TrialState.PRUNED)
    assert set(trial.constraints) & set(CONSTRAINTS) == set()  # Optuna adds the list's entries as '0'..'4'
    assert list(trial.system_attrs["constraints"]) == [0.0] * len(CONSTRAINTS)  # what the dashboard draws: no violation


@pytest.mark.parametrize("failed_stage, violated, unmeasured", [("fidelity", "fidelity", {"tasks"}),
                                                                ("tasks", "tasks", set())])
def test_a_gate_failure_records_the_stage_that_failed_and_nothing_after_it(failed_stage, violated, unmeasured):
    """Before: a trial the fidelity gate stopped stored `tasks` as violated, a suite it never ran."""
    runner = SimpleNamespace(_measure=lambda *a, **k: None)  # the results-db writer: not what is tested
    gate = GateRecord(decision_id=1, decision=GateDecision(passed=False, failed_stage=failed_stage, reasons=("r",),
                                                           fidelity=None, tasksets=()))

    def gated(record):
        record.constraints.update(fits=OK, launch_ok=OK, measured=OK)
        if failed_stage == "tasks":
            record.constraints["fidelity"] = OK
        TrialRunner._gated(runner, record.trial, None, record, gate, 1.0, 2.0)
        record.close()  # as the runner does where every trial ends

    trial = _finished(gated)
    assert trial.constraints[violated] == VIOLATED
    assert set(CONSTRAINTS) - set(trial.constraints) == unmeasured
    assert not feasible(trial)


def test_feasible_wants_every_constraint_recorded_and_satisfied():
    """Before: a COMPLETE trial whose recorded constraints were all satisfied was feasible, however few."""
    def trial(constraints):
        return optuna.trial.create_trial(values=[1.0, 2.0], constraints=constraints)

    assert not feasible(trial({k: OK for k in CONSTRAINTS if k != "tasks"}))  # the tasks never recorded
    assert not feasible(trial({}))
    assert not feasible(trial({**dict.fromkeys(CONSTRAINTS, OK), "fits": VIOLATED}))
    assert feasible(trial(dict.fromkeys(CONSTRAINTS, OK)))
