"""A task-tier verdict given after its trial finished, written back into that trial's own record.

With --task-tier-scope finalists (the default) a candidate that passed fidelity ends its trial pending
(TrialOutcome.TASKS_PENDING, no `tasks` constraint); the finalists' stage judges it later. Every reader of
feasibility reads the trial itself: TPE (`trial.constraints`), optuna-dashboard (the system attr
"constraints" and, for "Best Trial", the values of COMPLETE trials), study.feasible (the finalists' selection,
RESULTS.md). So the verdict is written there: the `tasks` constraint, the constraints list, the outcome, the
reasons, and the values: the measured speeds once it passed (a pending trial stores NOT_MEASURED, as a rejected
one does: autoresearch.ground.speeds), NOT_MEASURED for a rejection.

A study stored before that rule (rejected trials kept their speeds as values, and optuna-dashboard named
fidelity-rejected trials its "Best Trial") is re-stored the same way when it is opened
(`store_unpassed_without_values`): each finished trial that did not pass keeps its speeds in its user attrs and
NOT_MEASURED as its values.

Optuna 5 refuses every update to a finished trial through its API (`check_trial_is_updatable`), and has no
documented way to amend one; this module writes the same rows its RDBStorage writes (its ORM models, in its
own session) and refreshes this process's cached copy. Another process that still caches the trial sees
the verdict when it next opens the study.

Usage:
    record_task_verdict(study, trial_number, passed=False, reasons=["rg-math: lost 9, gained 0"])
    store_unpassed_without_values(study)   # the trials re-stored
"""

from __future__ import annotations

import json
import math

import optuna
from optuna.storages._rdb import models

from autoresearch.ground.outcome import TrialOutcome
from autoresearch.ground.speeds import SPEED_ATTRS, measured_values
from autoresearch.ground.study import CONSTRAINTS, OK, VIOLATED
from autoresearch.measures.objectives import NOT_MEASURED

__all__ = ["JUDGED", "PENDING", "record_task_verdict", "store_unpassed_without_values"]

# a trial's `task_tier` attr
PENDING = "pending"  # passed fidelity; judged by the finalists' stage only if it can become champion
JUDGED = "judged"  # judged: inside its trial (--task-tier-scope every) or by the finalists' stage


def record_task_verdict(study: optuna.Study, number: int, *, passed: bool,
                        reasons: list[str]) -> optuna.trial.FrozenTrial:
    """Write a finished trial's task-tier verdict into its record, `reasons` saying what the tier found (for a
    pass too: a smoke run judges nothing, and says so); returns the trial as stored now.

    Raises:
        TypeError: the study is not in an RDB storage (SQLite, PostgreSQL): the loop's always is.
    """
    trial = next(t for t in study.get_trials(deepcopy=False) if t.number == number)
    named = {k: v for k, v in trial.constraints.items() if k in CONSTRAINTS} | {"tasks": OK if passed else VIOLATED}
    system = {"constraints:tasks": named["tasks"], "constraints": [named.get(k, 0.0) for k in CONSTRAINTS]}
    outcome = TrialOutcome.PASSED if passed else TrialOutcome.gate_failed("tasks")
    earlier = [r for r in trial.user_attrs.get("reasons", []) if not r.startswith("task tier pending")]
    user = {"outcome": outcome.value, "task_tier": JUDGED,
            "reasons": [*earlier, *reasons]}
    values = measured_values(trial) if passed else NOT_MEASURED
    return _amend(study, trial, system=system, user=user, values=values)


def store_unpassed_without_values(study: optuna.Study) -> list[int]:
    """Re-store each finished trial that did not pass (its recorded outcome is a rejection or a pending task tier;
    one stored before outcomes: a violated constraint) but whose values are its speeds, as a study written before
    NOT_MEASURED holds them: its speeds into its user attrs (where absent), NOT_MEASURED as its values. Returns the
    numbers of the trials re-stored.

    Raises:
        TypeError: the study is not in an RDB storage (SQLite, PostgreSQL): the loop's always is.
    """
    restored = []
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        outcome = TrialOutcome.of(trial)
        passed = outcome in (TrialOutcome.PASSED, TrialOutcome.BASELINE) if outcome is not None else \
            all(trial.constraints.get(k, OK) <= 0 for k in CONSTRAINTS)  # a constraint missing then: not violated
        if passed or not trial.values or not all(math.isfinite(v) for v in trial.values):
            continue
        kept = {k: v for k, v in zip(SPEED_ATTRS, trial.values, strict=True) if k not in trial.user_attrs}
        _amend(study, trial, system={}, user=kept, values=NOT_MEASURED)
        restored.append(trial.number)
    return restored


def _amend(study: optuna.Study, trial: optuna.trial.FrozenTrial, *, system: dict, user: dict,
           values: tuple[float, float]) -> optuna.trial.FrozenTrial:
    """Write these attrs and values into a finished trial's rows; returns the trial as stored now."""
    cached, backend = _storages(study)
    session = backend.scoped_session()  # as RDBStorage writes: its thread's session, committed or rolled back
    try:
        row = models.TrialModel.find_or_raise_by_id(trial._trial_id, session)
        for model, attrs in ((models.TrialSystemAttributeModel, system), (models.TrialUserAttributeModel, user)):
            for key, value in attrs.items():
                attr = model.find_by_trial_and_key(row, key, session)
                if attr is None:
                    session.add(model(trial_id=row.trial_id, key=key, value_json=json.dumps(value)))
                else:
                    attr.value_json = json.dumps(value)
        for objective, value in enumerate(values):
            stored = models.TrialValueModel.find_by_trial_and_objective(row, objective, session)
            stored.value, stored.value_type = models.TrialValueModel.value_to_stored_repr(value)
        session.commit()
    except Exception:
        session.rollback()
        raise
    fresh = backend.get_trial(trial._trial_id)
    if cached is not None:  # this process's cache keeps finished trials as it first read them
        with cached._lock:
            cached._studies[study._study_id].trials[trial.number] = fresh
    return fresh


def _storages(study: optuna.Study):
    storage = study._storage
    if isinstance(storage, optuna.storages._CachedStorage):
        return storage, storage._backend
    if isinstance(storage, optuna.storages.RDBStorage):
        return None, storage
    raise TypeError(f"a verdict is written back only into an RDB storage (SQLite, PostgreSQL), not "
                    f"{type(storage).__name__}")
