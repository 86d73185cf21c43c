"""The run: open or resume the study, run trials until the stopping rule, confirm finalists, report.

Usage:
    exit_code = run(plan)
"""

from __future__ import annotations

import dataclasses
import logging
import time

import optuna

from autoresearch.champion.change_costs import gate_words
from autoresearch.champion.crowned import drop_dethroned
from autoresearch.champion.minimal_champion import minimize_champion
from autoresearch.champion.minimal_gate import gate_minimal, gate_tabbyapi_subset
from autoresearch.checks.judging import JUDGED
from autoresearch.checks.verdicts import store_unpassed_without_values
from autoresearch.crown.finalists import confirm_finalists, feasible_front
from autoresearch.ground.db import ResultsDB
from autoresearch.ground.errors import ConfirmedElsewhere, PlanError
from autoresearch.ground.logs import log_to_file
from autoresearch.ground.model_source import record_manifest
from autoresearch.ground.outcome import TrialOutcome
from autoresearch.ground.plan import RunPlan
from autoresearch.ground.preflight import preflight
from autoresearch.ground.ranked_by import ENERGY_RANKED, RANKED_BY
from autoresearch.ground.servers import reap_orphan_servers
from autoresearch.ground.speeds import measured_values
from autoresearch.ground.stages import (
    BASELINE_ANSWERS,
    FINALISTS,
    MINIMAL_GATE,
    MINIMIZE,
    REPORT,
    SEARCH,
    TABBYAPI_GATE,
    TASKS,
)
from autoresearch.ground.study import (
    COUNTED,
    baseline_trial,
    check_enqueued,
    is_baseline,
    open_study,
    tasks_pending,
)
from autoresearch.measures.faster import interval_text
from autoresearch.measures.ranking import Ranking
from autoresearch.night.clock import NIGHT_KEY, NightClock, tabbyapi_subset_launches
from autoresearch.night.progress import Progress
from autoresearch.night.rates import shape_of
from autoresearch.night_plan import announce, night_forecast
from autoresearch.report.results_md import write_report
from autoresearch.trial.runner import TrialRunner
from autoresearch.trial.suite_concurrency import CONCURRENCY_KEY, Concurrency, settle_suite_concurrency
from eval import EvalStore
from search_space import SpaceContext, build_space, read_model_info
from search_space.errors import SpaceError

__all__ = ["baseline_measured", "best_line", "counted_trials", "replan_after", "run"]

log = logging.getLogger(__name__)


def counted_trials(study: optuna.Study) -> int:
    """The trials --trials counts: COMPLETE and PRUNED, less the deferred (their configuration runs again)."""
    return sum(t.user_attrs.get("outcome") != TrialOutcome.DEFERRED for t in study.get_trials(deepcopy=False, states=COUNTED))


def baseline_measured(study: optuna.Study) -> bool:
    return baseline_trial(study) is not None


def best_line(study: optuna.Study) -> str:
    baseline = baseline_trial(study)
    if baseline is None:
        return "baseline not measured yet"
    front = [t for t in feasible_front(study, with_pending=True) if not is_baseline(t)]
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
    decode, prefill = measured_values(best)
    return (f"trial {best.number}: decode {decode:.1f}, prefill {prefill:.0f} tok/s "
            f"({score:.3f}x by {scalar}{pending})")


def _speedups(champion) -> str:
    """The ranked measure with its interval from the launches that confirmed it, then each rate beside it."""
    if champion.ranked_by not in (RANKED_BY, ENERGY_RANKED):
        return f"speed-up {champion.speedup:.3f}x (geometric mean of decode and prefill)"
    energy = champion.ranked_by == ENERGY_RANKED
    measure = (f"energy per request {champion.speedup:.3f}x less" if energy
               else f"request time {champion.speedup:.3f}x faster")
    if champion.speed:
        (low, high), (ref, cand) = champion.speed["interval"], champion.speed["launches"]
        measure += f" {interval_text(low, high)} ({cand} launches against the baseline's {ref})"
    return (f"{measure} (decode {champion.decode_speedup:.3f}x, prefill {champion.prefill_speedup:.3f}x"
            f"{' as fast' if energy else ''})")


def replan_after(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> str | None:
    """When a finished trial makes the night plan worth printing again, and why: the baseline's measured rates
    replace the stated or assumed ones; the first judgment's walks replace the design's."""
    if baseline_trial([trial]) is not None:
        return "night plan once the baseline measured its rates"
    if trial.user_attrs.get("task_tier") == JUDGED and sum(
            t.user_attrs.get("task_tier") == JUDGED for t in study.get_trials(deepcopy=False)) == 1:
        return "night plan once a candidate was judged"
    return None


def _task_judge(study: optuna.Study, runner: TrialRunner, progress: Progress, clock: NightClock):
    """The finalists' stage's task tier, for finalists whose tier is pending (--task-tier-scope finalists, also
    in a study resumed with another scope); None without a suite. A finalist after the first is judged only
    if its judgment fits before the deadline (autoresearch.night.clock: the second cut)."""
    if runner.tier is None:
        return None
    judged = [0]

    def judge(t: optuna.trial.FrozenTrial) -> dict:
        why = clock.may_judge(judged[0], judgment_s=progress.expected_s(TASKS) or 0.0,
                              report_s=progress.expected_s(REPORT) or 0.0)
        if why:
            log.warning("trial %d: %s", t.number, why)
            return {"passed": False, "reasons": [why], "cut": True}
        judged[0] += 1
        progress.stage(TASKS, trial=t.number)
        with clock.timed(TASKS):
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
    plan, concurrency = settle_suite_concurrency(plan, space)  # before the study: its settings store the number
    preflight(plan)
    plan.study_dir.mkdir(parents=True, exist_ok=True)
    with log_to_file(plan.study_dir / "loop.log"):
        return _run(plan, space, concurrency)


def _record_manifests(plan: RunPlan) -> None:
    """The run is accepted (its study is open): keep the manifests its models' resolving made."""
    for model in (plan.model, plan.draft_model):
        if model is not None:
            record_manifest(model)


def _run(plan: RunPlan, space, concurrency: Concurrency | None = None) -> int:
    db = ResultsDB(plan.storage_url)  # first: creates the file and switches SQLite to WAL
    store = EvalStore(plan.storage_url)
    stopped = reap_orphan_servers(plan.study_dir / "servers")
    if stopped:
        log.warning("stopped %d server(s) left running by a killed loop", stopped)
    study = open_study(plan, space)
    clock = NightClock(plan.hours, trials=plan.trials, stored=study.user_attrs.get(NIGHT_KEY))
    if clock.over:  # the same command after its night ended: nothing runs, its record stays
        log.info("%s", clock.ended_line())
        print(clock.ended_line())
        return 0
    if restored := store_unpassed_without_values(study):  # a study stored before NOT_MEASURED (the dashboard's best)
        log.info("trials %s did not pass: their speeds stay in their user attrs, their values are now NOT_MEASURED",
                 restored)
    _record_manifests(plan)
    log.info("study %s in %s: %d trials so far; search space of %s configurations", plan.study_name,
             plan.storage_url, len(study.trials), space.size())
    if concurrency is not None:
        log.info("%s", concurrency.line())
        if concurrency.decided or CONCURRENCY_KEY not in study.user_attrs:
            study.set_user_attr(CONCURRENCY_KEY, concurrency.to_attr())
    with Progress(study=plan.study_name, trials=plan.trials, hours=plan.hours,
                  after_search=lambda: clock.after, reserve=lambda: clock.reserve) as progress:
        if clock.left_s() is not None:  # a resumed night: what its earlier calls left
            progress.deadline = progress.started + clock.left_s()
        night = _Night(plan, space, study, db, store, progress, clock)
        progress.on_stage = night.stage_started
        try:
            with clock.autosave(study):  # saved at every stage's start and while it runs: a kill -9 loses little
                return night.run()
        finally:
            clock.save(study)


class _Night:
    """One call of the loop on its night: the search, then the stages after it, on the night's clock."""

    def __init__(self, plan: RunPlan, space, study: optuna.Study, db: ResultsDB, store: EvalStore,
                 progress: Progress, clock: NightClock):
        self.plan, self.space, self.study, self.db, self.store = plan, space, study, db, store
        self.progress, self.clock = progress, clock
        self.runner = TrialRunner(plan, space, db, store, progress)
        model = space.context.model
        self.shape = shape_of(model.hidden_size, len(model.layer_types), model.intermediate_size)

    def replan(self, when: str | None, measured: bool) -> None:
        """The night plan, re-made (printed only `when` it is worth printing), given to the display and the clock."""
        forecast = night_forecast(self.plan, self.study, self.db, self.runner.suite, measured=measured,
                                  report_s=self.progress.expected_s(REPORT) or 0.0, shape=self.shape)
        if when and self.runner.suite is not None:  # the printed plan is the task tier's: no suite, nothing to print
            announce(self.study, forecast, when)
        self.progress.forecast = forecast.expected_s
        self.clock.set_plan(forecast.after_search(), reserve=forecast.reserve(), trial_s=forecast.trial_s,
                            first=forecast.schedule())

    def stage_started(self, name: str) -> None:
        """Progress's hook at every stage's start: the baseline's first answers get their ETA from the rates its bench
        has just measured."""
        if name == BASELINE_ANSWERS:
            self.replan(None, measured=True)

    def report(self) -> None:
        started = time.monotonic()
        write_report(self.plan, self.study, self.db, self.store, dashboard=True)
        self.progress.reported(time.monotonic() - started)

    def next_trial_fits(self) -> bool:
        """The clock's rule (autoresearch.night.clock): a trial starts only if it and every stage after the search fit.
        The baseline always runs: nothing can be judged without it."""
        if not baseline_measured(self.study):
            return True
        expected = self.progress.expected_s
        why = self.clock.may_start((expected("trial") or 0.0) + (expected(REPORT) or 0.0))
        if why:
            log.info("%s", why)
            self.clock.search_stopped = why
        return why is None

    def after_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        self.progress.trial_finished(counted_trials(study), best_line(study))
        self.replan(replan_after(study, trial), measured=True)  # re-estimated after every trial
        self.clock.save(study)
        if self.plan.trials is not None and counted_trials(study) >= self.plan.trials or not self.next_trial_fits():
            study.stop()

    def search(self) -> None:
        plan, study = self.plan, self.study
        remaining = None if plan.trials is None else plan.trials - counted_trials(study)
        if remaining is not None and remaining <= 0:
            log.info("study %s is finished: it has %d trials (--trials %d); to extend it, run the same command "
                     "with --trials N, N > %d", plan.study_name, counted_trials(study), plan.trials,
                     counted_trials(study))
            self.replan(None, measured=True)  # a finished study has no night left to print
            return
        self.replan("night plan before the first trial" if not counted_trials(study) else "night plan on resuming",
                    measured=bool(counted_trials(study)))
        if not self.next_trial_fits():
            return
        searched = time.monotonic()
        try:
            study.optimize(self.runner, n_trials=None, callbacks=[self.after_trial], gc_after_trial=True)
        except BaseException:  # stopped (Ctrl-C, a baseline that failed): the report says where the night stood
            self.clock.add(SEARCH, time.monotonic() - searched)
            try:
                self.report()
            except Exception as exc:  # the stop's own error is the one to show
                log.warning("RESULTS.md not written on the stop: %s", exc)
            raise
        self.clock.add(SEARCH, time.monotonic() - searched)
        self.report()  # RESULTS.md at the end of each stage, not after each trial

    def finalists(self):
        """The finalists' stage; raises ConfirmedElsewhere as confirm_finalists does."""
        clock = self.clock
        self.progress.stage(FINALISTS)
        judged_before, started = clock.measured_s(TASKS), time.monotonic()
        per_launch = max((self.progress.expected_s("launch") or 0.0) + (self.progress.expected_s("bench") or 0.0), 1.0)

        def launch_budget(k: int) -> bool:  # the verdict adds launches only while they fit, the judgment kept
            budget = clock.stage_budget_s(FINALISTS)
            return budget is None or k * per_launch <= budget
        try:
            return confirm_finalists(self.plan, self.study, self.space, self.db,
                                     judge_tasks=_task_judge(self.study, self.runner, self.progress, clock),
                                     launch_budget=launch_budget)
        finally:  # the launches alone: the judgments inside the stage are timed as TASKS
            clock.add(FINALISTS, time.monotonic() - started - (clock.measured_s(TASKS) - judged_before),
                      planned_s=clock.after.get(FINALISTS))

    def minimize(self, champion) -> None:
        """The minimization, its launch bound what fits before the deadline with its gates kept (the first cut), and
        the gates that follow it; one that does not fit at all is cut: the confirmed champion stays, not minimized."""
        from autoresearch.champion.changes import changes_of
        from serving.config import ServingConfig

        plan, study, progress, clock = self.plan, self.study, self.progress, self.clock
        baseline = baseline_trial(study)
        changes = len(changes_of(ServingConfig.from_dict(champion.config),
                                 ServingConfig.from_dict(baseline.user_attrs["config"])))
        launch = (progress.expected_s("launch") or 0.0) + (progress.expected_s("bench") or 0.0)
        bound, cut = clock.minimize_bound(
            per_launch_s=max(launch, 1.0), launches=plan.minimize_launches, changes=changes,
            extra_launches=tabbyapi_subset_launches(plan.minimize_launches) if plan.engine == "exllamav3" else 0)
        if cut:
            log.warning("%s", cut)
            print(cut)
            return
        if bound is not None and (plan.minimize_max_launches is None or bound < plan.minimize_max_launches):
            log.info("the minimization is bounded at %d launches to end by the deadline", bound)
            plan = dataclasses.replace(plan, minimize_max_launches=bound)
        with clock.timed(MINIMIZE):
            progress.stage(MINIMIZE)
            minimization = minimize_champion(plan, study, self.db, champion)
        if minimization is not None and not minimization.complete and bound == plan.minimize_max_launches:
            clock.cut(f"minimization stopped at {minimization.launches} launches, the bound that ended it by the "
                      "deadline; its stop rule was not reached")
        with clock.timed(MINIMAL_GATE):
            progress.stage(MINIMAL_GATE)
            verdict = gate_minimal(plan, study, self.db, self.store, self.runner.tier, minimization)
        if minimization.extra.get("tabbyapi_subset"):  # what `export --format tabbyapi` writes, judged alike
            with clock.timed(TABBYAPI_GATE):
                progress.stage(TABBYAPI_GATE)
                subset = gate_tabbyapi_subset(plan, study, self.db, self.store, self.runner.tier, minimization)
            if subset is not None:
                print(f"TabbyAPI subset: gate {gate_words(subset)}")
        self.report()
        print(f"minimal champion: {len(minimization.kept)} of {len(minimization.changes)} changes kept "
              f"({minimization.launches} launches of at most {minimization.bound}); gate {gate_words(verdict)}")

    def run(self) -> int:
        self.search()
        try:
            champion = self.finalists()
        except ConfirmedElsewhere as exc:
            self.report()
            print(f"finalists: {exc}")
            return 0
        if dropped := drop_dethroned(self.study):  # the crown moved: that minimization is another champion's
            print(dropped)
        self.report()
        if champion is not None and self.plan.minimize and not champion.is_baseline:
            self.minimize(champion)
        self.clock.ended = True
        with self.clock.timed(REPORT):
            self.clock.save(self.study)
            self.report()  # with the night as run
        if champion is None:
            log.error("no champion decided: the baseline did not complete or could not be re-measured")
            return 1
        who = "the baseline (no candidate confirmed faster)" if champion.is_baseline else f"trial {champion.trial}"
        print(f"champion: {who}; decode {champion.decode_tok_per_s:.2f} tok/s, prefill "
              f"{champion.prefill_tok_per_s:.1f} tok/s, {_speedups(champion)}")
        print(f"results: {self.plan.results_md}")
        return 0
