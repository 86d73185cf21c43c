"""The Optuna study in results.db (or PostgreSQL): create or resume, and keep its invariants.

Resuming checks that the stored study measures the same thing (model, engine, suite, bench plan,
objective layout): Optuna itself would silently keep old directions. Trials left RUNNING by a
killed worker are failed by the heartbeat (stale after the grace period) and retried once with
the same parameters, so nothing the study decided is lost.
"""

from __future__ import annotations

import logging
import time
import warnings

import optuna
import sqlalchemy

from autoresearch.errors import PlanError, StudyError
from autoresearch.plan import OBJECTIVES, RunPlan
from search_space import SearchSpace, baseline_params

__all__ = ["CONSTRAINTS", "baseline_trial_params", "check_enqueued", "constraints_of", "feasible", "open_study",
           "params_with", "retry_interrupted"]

log = logging.getLogger(__name__)
# Each <= 0 when satisfied. A trial sets them by name (Optuna's trial.set_constraint): the one record.
CONSTRAINTS = ("fits", "launch_ok", "measured", "fidelity", "tasks")


def constraints_of(trial: optuna.trial.FrozenTrial) -> list[float]:
    """TPE's constraints_func: the trial's named constraints in CONSTRAINTS order; 0.0 for one it never
    measured (a duplicate, the tasks of a trial the fidelity gate stopped): no violation is invented.
    Every trial that is not feasible records the violation that made it so.

    Optuna then stores this list as the trial's system attr "constraints", which is what
    optuna-dashboard 0.21 draws (its _serializer.py reads trial_system_attrs["constraints"] only)."""
    named = trial.constraints
    return [named.get(k, 0.0) for k in CONSTRAINTS]


def feasible(trial: optuna.trial.FrozenTrial) -> bool:
    """COMPLETE with every constraint of CONSTRAINTS recorded and satisfied (one not measured: not feasible)."""
    constraints = trial.constraints
    return trial.state == optuna.trial.TrialState.COMPLETE and all(constraints.get(k, 1.0) <= 0 for k in CONSTRAINTS)


def _storage(plan: RunPlan) -> optuna.storages.RDBStorage:
    kwargs = {"connect_args": {"timeout": 60}} if plan.storage_url.startswith("sqlite") else {"pool_pre_ping": True}
    for attempt in range(5):  # workers starting together race to create Optuna's schema
        try:
            return optuna.storages.RDBStorage(
                plan.storage_url,
                engine_kwargs=kwargs,
                heartbeat_interval=plan.heartbeat_s,
                grace_period=plan.grace_s,
                heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=1),
            )
        except sqlalchemy.exc.SQLAlchemyError:
            if attempt == 4:
                raise
            time.sleep(0.5 + attempt)
    raise AssertionError("unreachable")


def check_enqueued(plan: RunPlan, space: SearchSpace) -> list[dict]:
    """--baseline's and each --enqueue's parameters, checked before any study is created (PlanError)."""
    return [baseline_trial_params(plan, space),
            *(params_with(space, {**plan.baseline_changes, **changes}, flag="--enqueue") for changes in plan.enqueued)]


def open_study(plan: RunPlan, space: SearchSpace) -> optuna.Study:
    baseline, *enqueued = check_enqueued(plan, space)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # heartbeat, metric names
        warnings.simplefilter("ignore", FutureWarning)  # constraints_func: the dashboard still needs it
        study = optuna.create_study(study_name=plan.study_name, storage=_storage(plan), load_if_exists=True,
                                    directions=["maximize", "maximize"])
        if tuple(d.name for d in study.directions) != ("MAXIMIZE", "MAXIMIZE"):
            raise StudyError(f"study {plan.study_name} has directions {study.directions}; this loop maximizes "
                             f"{OBJECTIVES}: choose another --study name")
        stored_key = study.user_attrs.get("run_key")
        if stored_key is not None and stored_key != plan.key:
            raise StudyError(
                f"study {plan.study_name} was made for another model, engine, suite or bench plan "
                f"(key {stored_key} != {plan.key}); choose another --study name"
            )
        if stored_key is None:
            study.set_user_attr("run_key", plan.key)
            study.set_user_attr("model", {"name": plan.model.name, "source": plan.model.source,
                                          "manifest_hash": plan.model.manifest_hash})
            study.set_user_attr("engine", plan.engine)
            study.set_user_attr("suite", plan.suite)
            study.set_user_attr("bench_plan", plan.bench_plan.to_dict())
            study.set_metric_names(list(OBJECTIVES))
        optuna.storages.fail_stale_trials(study)
        retry_interrupted(study)
        # Seeded by how far the study got, so a resumed run does not replay its start-up trials.
        study.sampler = optuna.samplers.TPESampler(
            seed=plan.seed + len(study.trials), multivariate=True, group=True, constraints_func=constraints_of,
            n_startup_trials=min(10, max(2, (plan.trials or 10) // 2)),
        )
    if not any(t.user_attrs.get("role") == "baseline" for t in study.get_trials(deepcopy=False)):
        study.enqueue_trial(baseline, user_attrs={"role": "baseline"}, skip_if_exists=True)
    for params in enqueued:
        study.enqueue_trial(params, user_attrs={"role": "candidate", "enqueued": True}, skip_if_exists=True)
    return study


def retry_interrupted(study: optuna.Study) -> list[int]:
    """Enqueue again each trial a Ctrl-C ended (FAIL, marked `interrupted_in` by the trial runner) that has
    no retry yet: the same parameters and role, as a trial killed with -9 is retried once its heartbeat is
    stale. Returns the numbers of the trials retried."""
    trials = study.get_trials(deepcopy=False)
    retried = {n for t in trials for n in t.system_attrs.get("retry_history", ())}
    interrupted = [t for t in trials if t.state == optuna.trial.TrialState.FAIL
                   and t.user_attrs.get("interrupted_in") == t.number and t.number not in retried]
    for trial in interrupted:
        optuna.storages.RetryFailedTrialCallback(max_retry=None)(study, trial)
        log.info("trial %d was interrupted (Ctrl-C): it runs again", trial.number)
    return [t.number for t in interrupted]


def baseline_trial_params(plan: RunPlan, space: SearchSpace) -> dict:
    """The defaults with --baseline's changes: the configuration every candidate is judged against."""
    return params_with(space, plan.baseline_changes, flag="--baseline")


def params_with(space: SearchSpace, changes: dict, *, flag: str) -> dict:
    """Default parameters with `changes` applied (knobs they activate at their defaults), checked."""
    from search_space import config_from_params

    unknown = sorted(set(changes) - {k.name for k in space.knobs})
    if unknown:
        raise PlanError(f"{flag}: {', '.join(unknown)} is not a knob of this search space; "
                        f"knobs: {', '.join(k.name for k in space.knobs)}")
    pinned = sorted(set(changes) & set(space.pinned))
    if pinned:
        raise PlanError(f"{flag}: {', '.join(pinned)} is pinned (--pin); change the pin instead")
    try:
        params = baseline_params(space, changes)
        config_from_params(space, params)
    except Exception as exc:
        raise PlanError(f"{flag} {changes}: {exc}") from exc
    return params
