"""The Optuna study in results.db (or PostgreSQL): create or resume, and keep its invariants.

Resuming checks that the stored study measures the same thing: its key (model, engine, suite, bench
plan, objective layout, baseline, gate, drafter) and, one by one, the settings that change what a
trial measures (RunPlan.measured_settings): Optuna itself would silently keep old directions. Trials left RUNNING by a
killed worker are failed by the heartbeat (stale after the grace period) and retried once with
the same parameters, so nothing the study decided is lost.
"""

from __future__ import annotations

import copy
import json
import logging
import time
import warnings
import zlib
from collections.abc import Iterable
from typing import Any

import optuna
import sqlalchemy

from autoresearch.ground.errors import PlanError, StudyError
from autoresearch.ground.plan import OBJECTIVES, RunPlan, worker_gone, worker_name
from autoresearch.ground.ranked_by import settle_ranked_by
from autoresearch.ground.speeds import speeds
from search_space import SearchSpace, baseline_params

__all__ = ["CONSTRAINTS", "COUNTED", "OK", "VIOLATED", "GateSampler", "baseline_trial", "baseline_trial_params", "check_enqueued",
           "constraints_of", "fail_gone_workers", "feasible", "is_baseline", "load_stored_study", "model_is_hybrid",
           "open_study", "params_with", "passed_so_far", "passed_speeds", "retry_interrupted", "sampler_seed", "tasks_pending",
           "with_pending_speeds"]

log = logging.getLogger(__name__)
# Each <= 0 when satisfied. A trial sets them by name (Optuna's trial.set_constraint): the one record.
CONSTRAINTS = ("fits", "launch_ok", "measured", "fidelity", "tasks")
_SETTINGS = "settings"  # the study's RunPlan.measured_settings, as its first run stored them
OK, VIOLATED = -1.0, 1.0  # a constraint satisfied, violated
COUNTED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)  # the states of a trial that ran


def constraints_of(trial: optuna.trial.FrozenTrial) -> list[float]:
    """TPE's constraints_func: the trial's named constraints in CONSTRAINTS order; 0.0 for one it never
    measured (a duplicate, the tasks of a trial the fidelity gate stopped): no violation is invented.
    Every trial that is not feasible records the violation that made it so.

    Optuna then stores this list as the trial's system attr "constraints", which is what
    optuna-dashboard 0.21 draws (its _serializer.py reads trial_system_attrs["constraints"] only)."""
    named = trial.constraints
    return [named.get(k, 0.0) for k in CONSTRAINTS]


def load_stored_study(plan: RunPlan) -> optuna.Study:
    """The plan's study as stored, for `report` and `export` (StudyError where the database has none by that name)."""
    try:
        return optuna.load_study(study_name=plan.study_name, storage=plan.storage_url)
    except KeyError as exc:
        raise StudyError(f"no study {plan.study_name!r} in {plan.storage_label}; run the loop first") from exc


def is_baseline(trial: optuna.trial.FrozenTrial) -> bool:
    """The trial measures the baseline (its user attr "role"), in whatever state it is."""
    return trial.user_attrs.get("role") == "baseline"


def baseline_trial(trials: optuna.Study | Iterable[optuna.trial.FrozenTrial]) -> optuna.trial.FrozenTrial | None:
    """The study's completed baseline trial (what every candidate is judged against); None before it completed."""
    if isinstance(trials, optuna.Study):
        trials = trials.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    return next((t for t in trials if is_baseline(t) and t.state == optuna.trial.TrialState.COMPLETE), None)


def model_is_hybrid(study: optuna.Study) -> bool:
    """The study's model has recurrent state: its baseline trial has the knob that only applies to such models."""
    return any(is_baseline(t) and "cache_slots" in t.params for t in study.trials)


def feasible(trial: optuna.trial.FrozenTrial) -> bool:
    """COMPLETE with every constraint of CONSTRAINTS recorded and satisfied (one not measured: not feasible)."""
    constraints = trial.constraints
    return trial.state == optuna.trial.TrialState.COMPLETE and all(constraints.get(k, 1.0) <= 0 for k in CONSTRAINTS)


def passed_so_far(trial: optuna.trial.FrozenTrial) -> bool:
    """Feasible, or through every gate that has run with its task tier pending: what may prune another trial as
    dominated and what the plan reads the best candidate from (a pending trial is the likely champion)."""
    return feasible(trial) or tasks_pending(trial)


def passed_speeds(trial: optuna.trial.FrozenTrial) -> tuple[float, float] | None:
    """(decode, prefill) of a trial through every gate that has run (passed_so_far), None otherwise or unmeasured:
    the speeds that may prune another trial, rank it on the front, or stand for the best so far."""
    return speeds(trial) if passed_so_far(trial) else None


def tasks_pending(trial: optuna.trial.FrozenTrial) -> bool:
    """COMPLETE with every constraint but `tasks` recorded and satisfied, and `tasks` never recorded: through
    fidelity, its task tier not run yet (--task-tier-scope finalists). Not feasible (nothing vouches for its
    tasks) and not rejected: the finalists' stage may judge it, and writes its verdict back (autoresearch.checks.verdicts)."""
    constraints = trial.constraints
    return (trial.state == optuna.trial.TrialState.COMPLETE and "tasks" not in constraints
            and all(constraints.get(k, 1.0) <= 0 for k in CONSTRAINTS if k != "tasks"))


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
        _check_settings(study, plan)
        settle_ranked_by(study, plan.rank_by, new=stored_key is None)  # another --rank-by on resume: refused
        if stored_key is None:
            study.set_user_attr("run_key", plan.key)
            study.set_user_attr("model", {"name": plan.model.name, "source": plan.model.source,
                                          "manifest_hash": plan.model.manifest_hash})
            study.set_user_attr("engine", plan.engine)
            study.set_user_attr("suite", plan.suite)
            study.set_user_attr("bench_plan", plan.bench_plan.to_dict())
            study.set_metric_names(list(OBJECTIVES))
        optuna.storages.fail_stale_trials(study)
        fail_gone_workers(study)
        retry_interrupted(study)
        study.sampler = GateSampler(
            seed=sampler_seed(plan.seed, len(study.trials), worker_name()), multivariate=True, group=True, constraints_func=constraints_of,
            n_startup_trials=min(10, max(2, (plan.trials or 10) // 2)),
        )
    if not any(is_baseline(t) for t in study.get_trials(deepcopy=False)):
        study.enqueue_trial(baseline, user_attrs={"role": "baseline"}, skip_if_exists=True)
    for params in enqueued:
        study.enqueue_trial(params, user_attrs={"role": "candidate", "enqueued": True}, skip_if_exists=True)
    if plan.levers:  # after the user's: what the catalog knows moves a rate on its own, before TPE combines
        for lever in space.levers(plan.baseline_changes):
            params = params_with(space, {**plan.baseline_changes, **lever}, flag="a lever")
            study.enqueue_trial(params, user_attrs={"role": "candidate", "lever": lever}, skip_if_exists=True)
    return study


def sampler_seed(seed: int, trials: int, worker: str) -> int:
    """--seed, how far the study got (a resumed run does not replay its start-up trials) and the worker
    (workers that open a shared study at one trial count would otherwise propose the same trials)."""
    return (seed + trials + zlib.crc32(worker.encode())) % 2**32


def _check_settings(study: optuna.Study, plan: RunPlan) -> None:
    """Refuse to resume with a setting that changes what was measured (RunPlan.measured_settings).

    A study with no completed trial measured nothing yet (a baseline that could not fit or launch is
    fixed with another --vram or --pin): it takes this run's settings. So does a study made before
    settings were stored, with a warning: they cannot be checked."""
    stored = study.user_attrs.get(_SETTINGS)
    settings = json.loads(json.dumps(plan.measured_settings))  # as the storage gives it back
    measured = bool(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))
    if stored is None or not measured:
        if stored is None and measured:
            log.warning("study %s stored no settings; it continues with this run's: %s", plan.study_name, settings)
        study.set_user_attr(_SETTINGS, settings)
        return
    for name, value in settings.items():
        if stored.get(name) != value:
            raise PlanError(f"{name}: study {plan.study_name} was measured with {json.dumps(stored.get(name))}, this "
                            f"run gives {json.dumps(value)}; resume with the stored value, or start afresh with "
                            "--study NEW")


def fail_gone_workers(study: optuna.Study) -> list[int]:
    """Fail each RUNNING trial whose worker is known to be gone (a killed process of this host: worker_gone) and
    retry it as a stale heartbeat would be, now rather than after --grace: a resume after kill -9 goes on at
    once. Returns the numbers of the trials failed."""
    storage = study._storage  # Optuna's own fail_stale_trials reaches it the same way
    failed = []
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        worker = t.user_attrs.get("worker")
        if not worker or worker == worker_name() or not worker_gone(worker):
            continue
        try:
            if storage.set_trial_state_values(t._trial_id, state=optuna.trial.TrialState.FAIL):
                failed.append(t)
        except optuna.exceptions.UpdateFinishedTrialError:
            continue  # another worker ended it
    retry = getattr(storage, "get_heartbeat_stale_trial_callback", lambda: None)()
    for t in failed:
        log.info("trial %d was left running by worker %s, which is gone: it runs again", t.number,
                 t.user_attrs["worker"])
        if retry is not None:
            retry(study, study._storage.get_trial(t._trial_id))
    return [t.number for t in failed]


def retry_interrupted(study: optuna.Study) -> list[int]:
    """Enqueue again each trial a Ctrl-C ended (FAIL, marked `interrupted_in` by the trial runner) that has
    no retry yet: the same parameters and role, as a trial killed with -9 is retried once its heartbeat is
    stale. Returns the numbers of the trials retried."""
    trials = study.get_trials(deepcopy=False)
    retried = {n for t in trials for n in t.system_attrs.get("retry_history", ())}
    interrupted = [t for t in trials if t.state == optuna.trial.TrialState.FAIL
                   and t.user_attrs.get("interrupted_in") == t.number and t.number not in retried]
    for trial in interrupted:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
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


class GateSampler(optuna.samplers.TPESampler):
    """TPE that reads a pending trial by its measured speeds, which Optuna's values cannot carry.

    A pending trial stores NOT_MEASURED as values (autoresearch.ground.speeds: else optuna-dashboard names it
    "Best Trial"). Plain TPE would rank the night's likely champions below every measured trial and search away
    from them; this one hands TPE a view of the study in which each carries its speeds (with_pending_speeds).
    Optuna is pinned (5.1.0): TPE reads trials through `study._get_trials` only (tests/autoresearch/test_pending.py)."""

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
    """The study, its trials read through with_pending_speeds."""

    def __init__(self, study: optuna.Study):
        self._study = study

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def _get_trials(self, *args, **kwargs) -> list[optuna.trial.FrozenTrial]:
        return [with_pending_speeds(t) for t in self._study._get_trials(*args, **kwargs)]
