"""Errors raised on purpose by the autoresearch loop.

    TunerError
    └── AutoresearchError
        ├── PlanError          a CLI value or combination is invalid (also a ValueError)
        ├── ModelSourceError   the model cannot be found, downloaded or verified
        ├── StudyError         the stored study does not match this run (directions, engine, model)
        ├── PortUnavailable    the server port stays taken by another process: no configuration is to blame
        ├── StorageError       the results database cannot be read or written (corrupt, not a database)
        ├── Unmeasured         a bench result lacks a valid run at some point of the plan
        │   └── BaselineUnmeasured   ...the baseline's (also a BaselineFailed)
        ├── BaselineFailed     the baseline trial failed (cannot fit, launch, be measured, or be the task
        │                      reference): nothing can be judged, the study stops
        ├── BaselineNotReady   the baseline must run (again) before this candidate: an outcome, not a failure
        └── ConfirmedElsewhere another worker holds the claim to confirm these finalists: an outcome
"""

from __future__ import annotations

import optuna

from tuner_errors import TunerError

__all__ = ["AutoresearchError", "BaselineFailed", "BaselineNotReady", "BaselineUnmeasured", "ConfirmedElsewhere",
           "ModelSourceError", "PlanError", "PortUnavailable", "StorageError", "StudyError",
           "Unmeasured"]


class AutoresearchError(TunerError):
    """Base for every error the loop raises on purpose."""


class PlanError(AutoresearchError, ValueError):
    """A CLI value or combination is invalid; the message says which and what to do."""


class ModelSourceError(AutoresearchError):
    """The model folder or Hub repository cannot be used; the message names the file or revision."""


class StudyError(AutoresearchError):
    """The stored study cannot be continued by this run."""


class Unmeasured(AutoresearchError):
    """An objective point has no valid run; the message names each point and its runs' reasons."""


class BaselineFailed(AutoresearchError):
    """The baseline trial failed, so no candidate can be judged: the study stops.

    `constraint` and `outcome` say what the baseline trial records (autoresearch.ground.outcome.TrialOutcome
    values): e.g. `fits`/`infeasible`, `launch_ok`/`oom_at_load`, `measured`/`unmeasured`,
    `tasks`/`baseline_tasks_invalid`.
    """

    def __init__(self, message: str, *, constraint: str, outcome: str):
        super().__init__(message)
        self.constraint = constraint
        self.outcome = outcome


class BaselineUnmeasured(BaselineFailed, Unmeasured):
    """The baseline's speed (or its task suite) could not be measured."""

    def __init__(self, message: str, *, constraint: str = "measured", outcome: str = "unmeasured"):
        super().__init__(message, constraint=constraint, outcome=outcome)


class PortUnavailable(AutoresearchError):
    """The server's port stays taken by another process; the loop stops instead of blaming a configuration."""


class StorageError(AutoresearchError):
    """The results database cannot be used; the message names it and says why in one line."""


class BaselineNotReady(AutoresearchError, optuna.TrialPruned):  # noqa: N818 - an outcome, not a failure
    """The baseline must run (again) before this candidate; the candidate is re-enqueued, not lost.

    Optuna ends the trial PRUNED (it is a TrialPruned), never FAIL: nothing failed. Its outcome is
    `deferred`, which neither --trials nor RESULTS.md's rejected candidates count; the re-enqueued trial
    measures the configuration.
    """


class ConfirmedElsewhere(AutoresearchError):  # noqa: N818 - an outcome, not a failure
    """Another worker of the study holds the claim to confirm these finalists."""
