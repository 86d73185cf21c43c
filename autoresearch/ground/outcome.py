"""How a trial ended: one classification, set where the trial runner closes a trial, read by the report.

The value is what the trial's user attr "outcome" holds (a str enum, so studies written before it
read back as members). A launch failure is the launcher's reason (`serving.errors.LaunchError.reason`).

Usage:
    TrialOutcome.of(trial)            # the member, or None before the trial ended
    TrialOutcome.of(trial).rejected   # listed among the rejected candidates
    TrialOutcome.of(trial) is TrialOutcome.TASKS_PENDING   # waiting for the task tier: not passed
"""

from __future__ import annotations

import enum

import optuna

__all__ = ["TrialOutcome"]


class TrialOutcome(enum.StrEnum):
    BASELINE = "baseline"  # the baseline, measured: every candidate is judged against it
    PASSED = "passed"  # measured and through every gate
    # through fidelity, its task tier not run yet (--task-tier-scope finalists): neither passed nor rejected
    # until the finalists' stage judges it (autoresearch.checks.verdicts writes that verdict back)
    TASKS_PENDING = "tasks_pending"
    DUPLICATE = "duplicate"  # a lower-numbered trial holds this configuration
    DEFERRED = "deferred"  # popped before the baseline was measured: re-enqueued after it, measured there
    INFEASIBLE = "infeasible"  # refused before any launch (memory model, cache too small)
    UNMEASURED = "unmeasured"  # bench left an objective point without a valid run
    CRASHED = "crashed"  # the server died under bench or the suite
    DOMINATED = "dominated"  # clearly slower than the gated front on both objectives
    FIDELITY_ERROR = "fidelity_error"  # fidelity could not be measured on this configuration
    GATE_FAILED_FIDELITY = "gate_failed_fidelity"
    GATE_FAILED_TASKS = "gate_failed_tasks"
    BASELINE_TASKS_INVALID = "baseline_tasks_invalid"  # the baseline's suite cannot be the reference
    EVAL_ERROR = "eval_error"  # the baseline's reference, noise floor or suite could not be run at all
    # the launcher's reasons (serving.errors)
    LAUNCH_FAILED = "launch_failed"
    CONFIG_REJECTED = "config_rejected"
    OOM_AT_LOAD = "oom_at_load"
    OOM_WHILE_SERVING = "oom_while_serving"
    CRASH = "crash"
    STARTUP_TIMEOUT = "startup_timeout"
    PORT_IN_USE = "port_in_use"

    @classmethod
    def of(cls, trial: optuna.trial.FrozenTrial) -> TrialOutcome | None:
        value = trial.user_attrs.get("outcome")
        return None if value is None else cls(value)

    @classmethod
    def gate_failed(cls, stage: str) -> TrialOutcome:
        return cls(f"gate_failed_{stage}")

    @property
    def rejected(self) -> bool:
        """Listed among the rejected candidates in RESULTS.md: everything but a pass (and the baseline)."""
        return self not in (TrialOutcome.PASSED, TrialOutcome.BASELINE, TrialOutcome.TASKS_PENDING,
                            TrialOutcome.DEFERRED)
