"""What one trial learned, written once where it ends: its constraints, reasons, outcome and stage times.

Usage:
    record = TrialRecord(trial); record.stage("bench"); record.fail("measured", why); record.end(outcome)
    record.close()                                   # the trial's one record of how it ended
    record_request_time(trial, result, baseline_bench)
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import optuna

from autoresearch.ground.outcome import TrialOutcome
from autoresearch.ground.study import VIOLATED
from autoresearch.measures.energy import record_energy
from autoresearch.measures.objectives import NOT_MEASURED
from autoresearch.measures.ranking import RATES, REQUEST_SPEEDUP, objective_rates
from autoresearch.measures.request_time import RequestMix
from bench import BenchResult

__all__ = ["TrialRecord", "record_request_time"]


@dataclass
class TrialRecord:
    """What a trial learned; written to user_attrs and constraints once, when the trial ends (`close`).

    Only what was measured is recorded: a duplicate records no constraint, a trial stopped at the
    fidelity gate none for the tasks it never ran (`study.feasible` wants every one, satisfied)."""

    trial: optuna.Trial
    constraints: dict[str, float] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)
    outcome: TrialOutcome | None = None  # set by the stage that ends the trial
    stage_s: dict[str, float] = field(default_factory=dict)  # seconds per stage: the night plan's measured rates
    _current: tuple[str, float] | None = None

    def stage(self, name: str) -> None:
        self._time_stage()
        self._current = (name, time.monotonic())
        self.trial.set_user_attr("stage", name)

    def _time_stage(self) -> None:
        if self._current is not None:
            name, started = self._current
            self.stage_s[name] = self.stage_s.get(name, 0.0) + time.monotonic() - started
            self.trial.set_user_attr("stage_s", {k: round(v, 3) for k, v in self.stage_s.items()})
            self._current = None

    def fail(self, constraint: str, reason: str) -> None:
        self.constraints[constraint] = VIOLATED
        self.reasons.append(reason)

    def end(self, outcome: TrialOutcome, values: tuple[float, float] = NOT_MEASURED) -> tuple[float, float]:
        self.outcome = outcome
        return values

    def close(self) -> None:
        """The trial's one record of how it ended; a trial that ended in no outcome (an error) writes none."""
        self._time_stage()
        if self.outcome is None:
            return
        for key, value in self.constraints.items():
            self.trial.set_constraint(key, value)
        # The one record: study.constraints_of lists these for TPE, and Optuna stores that list as the
        # system attr "constraints", the one optuna-dashboard 0.21 draws (not a user attr).
        self.trial.set_user_attr("outcome", self.outcome.value)
        self.trial.set_user_attr("reasons", self.reasons)


def record_request_time(trial: optuna.Trial, result: BenchResult, baseline: BenchResult,
                        pool: Mapping | None = None) -> None:
    """The trial's rates and its request-time speed-up over the baseline's launches pooled so far (`pool`: the
    study's autoresearch.measures.pool; None: the baseline's first launch), the dashboard's number, with
    `request_speedup_of` saying against how many launches (ranking reads the pool again whenever it ranks)."""
    rates = objective_rates(result)
    trial.set_user_attr(RATES, rates)
    mix = RequestMix.from_bench(baseline)
    pooled = (pool or {}).get("request_s")  # each baseline launch's request time, their geometric mean
    trial.set_user_attr(REQUEST_SPEEDUP, (pooled or mix.time_s(objective_rates(baseline))) / mix.time_s(rates))
    trial.set_user_attr("request_speedup_of", f"the baseline's {pool['launches']} launches pooled" if pooled
                        else "the baseline's first launch")
    record_energy(trial, result, mix)
