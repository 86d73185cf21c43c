"""The run: open or resume the study, run trials until the stopping rule, confirm finalists, report.

Usage:
    exit_code = run(plan)
"""

from __future__ import annotations

import logging

import optuna

from autoresearch.db import ResultsDB
from autoresearch.errors import BaselineFailed, BaselineNotReady, ConfirmedElsewhere, PlanError
from autoresearch.finalists import confirm_finalists, feasible_front
from autoresearch.judging import JUDGED
from autoresearch.logs import log_to_file
from autoresearch.minimal_champion import minimize_champion
from autoresearch.minimal_gate import gate_minimal, gate_tabbyapi_subset
from autoresearch.model_source import record_manifest
from autoresearch.night import announce_plan
from autoresearch.plan import RunPlan
from autoresearch.preflight import preflight
from autoresearch.progress import Progress
from autoresearch.ranking import Ranking
from autoresearch.report import write_report
from autoresearch.request_time import ENERGY_RANKED, RANKED_BY
from autoresearch.servers import reap_orphan_servers
from autoresearch.study import check_enqueued, open_study, tasks_pending
from autoresearch.trial import TrialRunner
from eval import EvalStore
from search_space import SpaceContext, build_space, read_model_info
from search_space.errors import SpaceError

__all__ = ["best_line", "counted_trials", "replan_after", "run"]

log = logging.getLogger(__name__)
_COUNTED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)


def counted_trials(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=_COUNTED))


def best_line(study: optuna.Study) -> str:
    trials = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    baseline = next((t for t in trials if t.user_attrs.get("role") == "baseline"), None)
    if baseline is None:
        return "baseline not measured yet"
    front = [t for t in feasible_front(study, with_pending=True) if t.user_attrs.get("role") != "baseline"]
    line = f"baseline (decode {baseline.values[0]:.1f}, prefill {baseline.values[1]:.0f} tok/s)"
    if not front:
        return line
    ranking = Ranking.of(study)
    ranked = ranking.rank(front, baseline)
    if not ranked:
        return f"{line}; no front member could be ranked (see the warnings)"
    score, best = ranked[0]
    scalar = ranking.measure.name if ranking.mix is not None else "geometric mean"
    if score <= 1.0:  # on the front by one objective, slower overall: the baseline is still the best
        return f"{line}; no candidate {ranking.measure.better} yet (closest: trial {best.number} at {score:.3f}x by {scalar})"
    pending = ", task tier pending" if tasks_pending(best) else ""
    return (f"trial {best.number}: decode {best.values[0]:.1f}, prefill {best.values[1]:.0f} tok/s "
            f"({score:.3f}x by {scalar}{pending})")


def _speedups(champion) -> str:
    if champion.ranked_by == ENERGY_RANKED:
        return (f"energy per request {champion.speedup:.3f}x less (decode {champion.decode_speedup:.3f}x, prefill "
                f"{champion.prefill_speedup:.3f}x as fast)")
    if champion.ranked_by != RANKED_BY:
        return f"speed-up {champion.speedup:.3f}x (geometric mean of decode and prefill)"
    return (f"request time {champion.speedup:.3f}x faster (decode {champion.decode_speedup:.3f}x, prefill "
            f"{champion.prefill_speedup:.3f}x)")


def replan_after(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> str | None:
    """When a finished trial makes the night plan worth printing again, and why: the baseline's measured rates
    replace the stated or assumed ones; the first judgment's walks replace the design's."""
    if trial.user_attrs.get("role") == "baseline" and trial.state == optuna.trial.TrialState.COMPLETE:
        return "night plan once the baseline measured its rates"
    if trial.user_attrs.get("task_tier") == JUDGED and sum(
            t.user_attrs.get("task_tier") == JUDGED for t in study.get_trials(deepcopy=False)) == 1:
        return "night plan once a candidate was judged"
    return None


def _task_judge(study: optuna.Study, runner: TrialRunner, progress: Progress):
    """The finalists' stage's task tier, for finalists whose tier is pending (--task-tier-scope finalists, also
    in a study resumed with another scope); None without a suite."""
    if runner.tier is None:
        return None

    def judge(t: optuna.trial.FrozenTrial) -> dict:
        progress.stage(f"task tier: trial {t.number}")
        return runner.tier.judge_pending(study, t)

    return judge


def run(plan: RunPlan) -> int:
    draft = read_model_info(plan.draft_model.path) if plan.draft_model is not None else None
    try:
        space = build_space(SpaceContext(engine=plan.engine, model=read_model_info(plan.model.path),
                                         draft_model=draft), pinned=plan.pinned)
    except SpaceError as exc:  # a --pin mistake: a usage error, found before anything is created
        raise PlanError(f"--pin: {exc}") from exc
    check_enqueued(plan, space)
    preflight(plan)
    plan.study_dir.mkdir(parents=True, exist_ok=True)
    with log_to_file(plan.study_dir / "loop.log"):
        return _run(plan, space)


def _record_manifests(plan: RunPlan) -> None:
    """The run is accepted (its study is open): keep the manifests its models' resolving made."""
    for model in (plan.model, plan.draft_model):
        if model is not None:
            record_manifest(model)


def _run(plan: RunPlan, space) -> int:
    db = ResultsDB(plan.storage_url)  # first: creates the file and switches SQLite to WAL
    store = EvalStore(plan.storage_url)
    stopped = reap_orphan_servers(plan.study_dir / "servers")
    if stopped:
        log.warning("stopped %d server(s) left running by a killed loop", stopped)
    study = open_study(plan, space)
    _record_manifests(plan)
    log.info("study %s in %s: %d trials so far; search space of %s configurations", plan.study_name,
             plan.storage_url, len(study.trials), space.size())
    with Progress(study=plan.study_name, trials=plan.trials, hours=plan.hours) as progress:
        runner = TrialRunner(plan, space, db, store, progress)

        def night(when: str, measured: bool) -> None:
            if runner.suite is not None:  # the plan is the task tier's: no suite, nothing to plan
                progress.forecast = announce_plan(plan, study, db, runner.suite, when, measured=measured).expected_s

        def after_trial(study: optuna.Study, _trial: optuna.trial.FrozenTrial) -> None:
            progress.trial_finished(counted_trials(study), best_line(study))
            when = replan_after(study, _trial)
            if when:
                night(when, measured=True)
            write_report(plan, study, db, store)

        callbacks = [after_trial]
        if plan.trials is not None:
            callbacks.insert(0, optuna.study.MaxTrialsCallback(plan.trials, states=_COUNTED))
        remaining = None if plan.trials is None else plan.trials - counted_trials(study)
        if remaining is not None and remaining <= 0:
            log.info("study %s is finished: it has %d trials (--trials %d); to extend it, run the same command "
                     "with --trials N, N > %d", plan.study_name, counted_trials(study), plan.trials,
                     counted_trials(study))
        if remaining is None or remaining > 0:  # a finished study has no night left to plan
            night("night plan before the first trial" if not counted_trials(study) else "night plan on resuming",
                  measured=bool(counted_trials(study)))
            try:
                study.optimize(runner, n_trials=None, timeout=plan.hours * 3600 if plan.hours else None,
                               callbacks=callbacks, catch=(BaselineNotReady,), gc_after_trial=True)
            except BaselineFailed:
                write_report(plan, study, db, store)  # it says why the study stopped
                raise
        progress.stage("confirming finalists")
        try:
            champion = confirm_finalists(plan, study, space, db,
                                         judge_tasks=_task_judge(study, runner, progress))
        except ConfirmedElsewhere as exc:
            write_report(plan, study, db, store)
            print(f"finalists: {exc}")
            return 0
        write_report(plan, study, db, store)
        if champion is not None and plan.minimize and not champion.is_baseline:
            progress.stage("minimizing the champion")
            minimization = minimize_champion(plan, study, db, champion)
            progress.stage("gating the minimal champion")
            verdict = gate_minimal(plan, study, db, store, runner.tier, minimization)
            if minimization.extra.get("tabbyapi_subset"):  # what `export --format tabbyapi` writes, judged alike
                progress.stage("gating the TabbyAPI subset")
                subset = gate_tabbyapi_subset(plan, study, db, store, runner.tier, minimization)
                print(f"TabbyAPI subset: gate {'passed' if subset['passed'] else 'failed'}: {subset['reason']}")
            write_report(plan, study, db, store)
            print(f"minimal champion: {len(minimization.kept)} of {len(minimization.changes)} changes kept "
                  f"({minimization.launches} launches of at most {minimization.bound}); gate "
                  f"{'passed' if verdict['passed'] else 'failed'}: {verdict['reason']}")
    if champion is None:
        log.error("no champion decided: the baseline did not complete or could not be re-measured")
        return 1
    who = "the baseline (no candidate confirmed faster)" if champion.is_baseline else f"trial {champion.trial}"
    print(f"champion: {who}; decode {champion.decode_tok_per_s:.2f} tok/s, prefill {champion.prefill_tok_per_s:.1f} "
          f"tok/s, {_speedups(champion)}")
    print(f"results: {plan.results_md}")
    return 0
