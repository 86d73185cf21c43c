"""One trial, in stages, cheapest first: feasibility, launch, bench, dominance, fidelity, tasks.

The task tier runs inside the trial with --task-tier-scope every; with finalists (the default) a
candidate that passed fidelity is left pending for the finalists' stage (autoresearch.checks.judging connects
both to the lazy baseline of autoresearch.checks.task_tier). Each candidate leaves one gate decision row.

Every exit records what was learned and why it stopped, as one `TrialOutcome` written where the
trial ends. A configuration that cannot fit, will not launch, or fails the gate is a COMPLETE trial
with a violated constraint (samplers ignore FAIL trials, and would propose it again); one clearly
slower than the gated front is PRUNED after its speed is stored, and so is a duplicate (the
lowest-numbered trial of a configuration measures it). An evaluator that breaks in the task tier (or a lazy
baseline whose answers cannot be the reference) stops the loop: the trial is marked interrupted, its one
decision row says why, and the next run judges it again. Programming errors propagate.

The baseline trial is special: it is checked for feasibility like any trial, then runs the baseline
protocol (autoresearch.trial.baseline_protocol: measured first; the fidelity reference and the suite's
results; a second launch for the noise floors of speed and fidelity) and records its evidence
(`autoresearch.measures.baseline`). A baseline that fails any stage records its reason like any trial and
stops the study (BaselineFailed). Every candidate waits for its evidence and is judged against it. Server info and provenance come from
`autoresearch.trial.provenance`, the memory model's calibration from `autoresearch.trial.memory`.
"""

from __future__ import annotations

import contextlib
import logging
import time
import warnings

import optuna

from autoresearch.checks.drift import DriftWatch
from autoresearch.checks.judging import JUDGED, PENDING, TierRunner
from autoresearch.checks.readings import conditions
from autoresearch.ground.db import ResultsDB
from autoresearch.ground.errors import BaselineFailed, Unmeasured
from autoresearch.ground.outcome import TrialOutcome
from autoresearch.ground.plan import RunPlan, worker_name
from autoresearch.ground.study import CONSTRAINTS, OK, VIOLATED, is_baseline
from autoresearch.measures.baseline import (
    BaselineEvidence,
)
from autoresearch.measures.objectives import objectives_from_bench
from autoresearch.measures.ranking import Ranking
from autoresearch.night.progress import Progress
from autoresearch.trial.baseline_protocol import BaselineProtocol
from autoresearch.trial.memory import memory_calibration
from autoresearch.trial.provenance import record_provenance, server_info
from autoresearch.trial.record import TrialRecord, record_request_time
from bench import BenchError, BenchResult
from bench.metrics import Metric
from eval import (
    EvalStore,
    SuiteOverrides,
    apply_overrides,
    build_probe_set,
    gate_candidate,
    get_suite,
    measure_fidelity,
    record_unjudged,
)
from eval.errors import EvalError, TasksetRunError
from openai_client import ClientError
from results import to_jsonable
from search_space import (
    MemoryModel,
    SearchSpace,
    check_fit,
    sample_config,
)
from search_space.budget import Budget
from serving.config import ServingConfig
from serving.errors import LaunchError

__all__ = ["CONSTRAINTS", "TrialRunner"]

log = logging.getLogger(__name__)
DUPLICATE_POLL_S = 0.2  # how often a trial looks again at a lower-numbered one still choosing its configuration


class TrialRunner(BaselineProtocol):
    """The Optuna objective. One per loop process; holds the run's shared state."""

    def __init__(self, plan: RunPlan, space: SearchSpace, db: ResultsDB, store: EvalStore, progress: Progress):
        self.plan = plan
        self.space = space
        self.db = db
        self.store = store
        self.progress = progress
        self.probe_set = build_probe_set(plan.probe_config)
        # suite "none": the gate is fidelity alone (say, where verifiers cannot be installed); RESULTS.md says so
        self.suite = None if plan.suite == "none" else apply_overrides(get_suite(plan.suite),
                                                                         SuiteOverrides(**plan.suite_overrides))
        self.memory = MemoryModel(space.context.model) if plan.engine == "exllamav3" else None
        self.drift = DriftWatch(plan, db, space)  # re-measures the baseline, and says when not to prune
        self.tier = TierRunner(plan, self.suite, store, db) if self.suite is not None else None

    # ---- the objective ----

    def __call__(self, trial: optuna.Trial) -> tuple[float, float]:
        try:
            return self._run(trial)
        except KeyboardInterrupt:  # Ctrl-C: the loop's next run retries this trial (study.retry_interrupted)
            trial.set_user_attr("interrupted_in", trial.number)
            raise

    def _run(self, trial: optuna.Trial) -> tuple[float, float]:
        config = sample_config(trial, self.space)
        role = trial.user_attrs.get("role", "candidate")
        trial.set_user_attr("role", role)
        trial.set_user_attr("worker", worker_name())
        trial.set_user_attr("config", config.to_dict())
        trial.set_user_attr("config_digest", config.digest)  # before looking for duplicates: see _original_of
        self.progress.trial_started(trial.number, role, config.digest)
        record = TrialRecord(trial)
        try:
            if role == "baseline":
                return self._baseline(trial, config, record)
            return self._candidate(trial, config, record)
        finally:
            record.close()  # the one place a trial's outcome is written

    def _duplicate(self, trial: optuna.Trial, record: TrialRecord, original: int, reason: str) -> None:
        trial.set_user_attr("duplicate_of", original)
        record.reasons.append(reason)
        record.end(TrialOutcome.DUPLICATE)
        raise optuna.TrialPruned(f"duplicate of trial {original}")

    def _candidate(self, trial: optuna.Trial, config: ServingConfig, record: TrialRecord) -> tuple[float, float]:
        original = self._original_of(trial, config.digest)
        if original is not None:
            self._duplicate(trial, record, original, f"same configuration as trial {original}")
        self._stage(record, "feasibility")  # first: it needs nothing but the checkpoint's headers
        if not self._fits(trial, config, record):
            return record.end(TrialOutcome.INFEASIBLE)
        record.constraints["fits"] = OK
        self._stage(record, "waiting for the baseline")
        baseline = self._wait_for_baseline(trial)
        self.drift.before_launch(trial)  # a fresh reading of the baseline, when one is due

        try:
            self._stage(record, "launch")
            with contextlib.ExitStack() as stack:  # the task tier may stop this server before the baseline's starts
                server = stack.enter_context(self._server(trial, config))
                record.constraints["launch_ok"] = OK
                self._stage(record, "bench")
                try:
                    result = self._bench(trial, config, server)
                    decode, prefill = objectives_from_bench(result)
                except Unmeasured as exc:
                    failure = self._server_failure(server)
                    if failure:  # its runs failed because the server died: a crash, not a slow config
                        record.fail("launch_ok", failure)
                    record.fail("measured", f"unmeasured: {exc}")
                    return record.end(TrialOutcome.CRASHED if failure else TrialOutcome.UNMEASURED)
                record.constraints["measured"] = OK
                trial.set_user_attr("decode_tok_per_s", decode)
                trial.set_user_attr("prefill_tok_per_s", prefill)
                record_request_time(trial, result, baseline.bench, Ranking.of(trial.study).pool)
                better, drift_note = self.drift.dominated_by(trial, (decode, prefill),
                                                             margin_rel=self._dominance_margin(baseline))
                if drift_note:
                    record.reasons.append(drift_note)
                if better is not None:
                    record.reasons.append(f"clearly slower than trial {better} on both objectives")
                    record.end(TrialOutcome.DOMINATED)
                    raise optuna.TrialPruned(f"dominated by trial {better}")

                self._stage(record, "fidelity")
                try:
                    fidelity = measure_fidelity(server.url, baseline.reference, store=self.store, role="candidate",
                                                label=self._label(trial, config))
                except EvalError as exc:  # e.g. a context too small for the probes: this config cannot serve them
                    record.fail("fidelity", f"fidelity could not be measured: {exc}")
                    return record.end(TrialOutcome.FIDELITY_ERROR)  # rejected: no values (see _gated)
                self._measure(trial, config, "fidelity", {"measurement_id": fidelity.measurement_id,
                                                          "metrics": fidelity.metrics})
                trial.set_user_attr("fidelity_measurement_id", fidelity.measurement_id)
                trial.set_user_attr("gate_label", self._label(trial, config))
                judge_here = self.tier is not None and self.plan.task_tier_scope == "every"
                gate = self._fidelity_gate(trial, config, baseline, fidelity, tiers_follow=judge_here)
                if not gate.decision.passed:
                    return self._gated(trial, config, record, gate, decode, prefill)
                record.constraints["fidelity"] = OK
                return self._task_tier(trial, config, record, gate, (decode, prefill),
                                       server=server, stop_server=stack.close, baseline=baseline, fidelity=fidelity)
        except LaunchError as exc:
            return self._launch_failed(trial, config, record, exc)

    def _task_tier(self, trial, config: ServingConfig, record: TrialRecord, gate, values: tuple[float, float], *,
                   server, stop_server, baseline: BaselineEvidence, fidelity) -> tuple[float, float]:
        """After fidelity passed: the task tier in this trial (--task-tier-scope every), pending for the
        finalists' stage (finalists), or none (--suite none)."""
        if self.tier is None:
            record.constraints["tasks"] = OK
            record.reasons.append("task suite not run (--suite none): gated on fidelity only")
            return self._gated(trial, config, record, gate, *values)
        if self.plan.task_tier_scope != "every":  # judged by the finalists' stage if it can become champion
            trial.set_user_attr("task_tier", PENDING)
            record.reasons.append("task tier pending: judged by the finalists' stage before it can be "
                                  "crowned (--task-tier-scope finalists)")
            return self._gated(trial, config, record, gate, *values, tasks_pending=True)
        self._stage(record, "tasks")
        released = []

        def release() -> None:  # one server at a time: the candidate's goes down before the baseline's starts
            released.append(True)
            stop_server()

        try:
            gate, _ = self.tier.judge(trial.study, trial=trial.number, label=self._label(trial, config),
                                      config=config, baseline=baseline, fidelity=fidelity, server=server,
                                      release=release)
        except LaunchError as exc:  # a server the tier launched did not start: the one decision row says so
            self._unjudged(trial, config, gate, baseline.label, f"{exc.reason}: {exc}")
            raise
        except (EvalError, BaselineFailed) as exc:
            if not isinstance(exc, TasksetRunError) or released or self._server_failure(server) is None:
                self._interrupted(trial, config, gate, baseline.label, f"{type(exc).__name__}: {exc}")
                raise  # the evaluator broke (or the lazy baseline cannot be the reference): stop and say so
        except KeyboardInterrupt:
            self._interrupted(trial, config, gate, baseline.label, "Ctrl-C")
            raise
        failure = None if released else self._server_failure(server)
        if failure:  # the suite's requests died with the server: not the model's answers
            self._unjudged(trial, config, gate, baseline.label, failure)
            record.fail("launch_ok", failure)
            return record.end(TrialOutcome.CRASHED)
        trial.set_user_attr("task_tier", JUDGED)
        return self._gated(trial, config, record, gate, *values)

    def _unjudged(self, trial, config: ServingConfig, gate, baseline_label: str, reason: str) -> None:
        """The candidate's one decision row when its task tier could not run after fidelity passed."""
        row = record_unjudged(self.store, model_manifest_hash=self.plan.model.manifest_hash,
                              candidate_label=self._label(trial, config), baseline_label=baseline_label,
                              policy=self.plan.gate_policy, stage="tasks", reason=reason, fidelity=gate.decision.fidelity)
        trial.set_user_attr("gate_decision_id", row.decision_id)

    def _interrupted(self, trial, config: ServingConfig, gate, baseline_label: str, why: str) -> None:
        """The task tier stopped for a reason that is not the candidate's (its evaluator, the lazy baseline, a
        Ctrl-C): the trial's one decision row says so, and it is retried as an interrupted one
        (autoresearch.ground.study.retry_interrupted): the next run judges the configuration again."""
        log.error("trial %d is interrupted in its task tier (%s): the next run judges it again", trial.number, why)
        self._unjudged(trial, config, gate, baseline_label, f"interrupted ({why}); the next run judges it again")
        trial.set_user_attr("interrupted_in", trial.number)

    def _fidelity_gate(self, trial, config: ServingConfig, baseline: BaselineEvidence, fidelity,
                       *, tiers_follow: bool):
        return gate_candidate(self.store, model_manifest_hash=self.plan.model.manifest_hash,
                              candidate_label=self._label(trial, config), baseline_label=baseline.label,
                              policy=self.plan.gate_policy, floor=baseline.fidelity_floor, candidate_fidelity=fidelity,
                              tiers_follow=tiers_follow)

    def _launch_failed(self, trial, config: ServingConfig, record: TrialRecord, exc: LaunchError) -> tuple[float, float]:
        record.fail("launch_ok", f"{exc.reason}: {exc}")
        trial.set_user_attr("failure", exc.reason)
        trial.set_user_attr("log_tail", exc.log_tail[-3000:])
        self._measure(trial, config, "launch", {"reason": exc.reason, "message": str(exc),
                                                 "log_tail": exc.log_tail[-3000:]})
        return record.end(TrialOutcome(exc.reason))

    def _gated(self, trial, config, record: TrialRecord, gate, decode: float, prefill: float, *,
               tasks_pending: bool = False) -> tuple[float, float]:
        """The gate's verdict as the trial's record. Passed with `tasks_pending`: no `tasks` constraint and an
        outcome of its own until the finalists' stage judges it (autoresearch.checks.verdicts). Rejected or
        pending: NOT_MEASURED as its objective values (its speeds stay in its user attrs): optuna-dashboard 0.21
        names as "Best Trial" the Pareto front of every COMPLETE trial's values, constraints ignored. TPE ranks
        an infeasible trial by its violation alone, and a pending one by its speeds (autoresearch.ground.study.GateSampler)."""
        decision = gate.decision
        self._measure(trial, config, "gate", {"decision_id": gate.decision_id, "passed": decision.passed,
                                              "failed_stage": decision.failed_stage, "reasons": decision.reasons})
        trial.set_user_attr("gate_decision_id", gate.decision_id)
        if decision.passed:
            record.constraints["fidelity"] = OK
            if tasks_pending:  # its speeds stay in its user attrs (autoresearch.ground.speeds) until judged
                return record.end(TrialOutcome.TASKS_PENDING)
            record.constraints["tasks"] = OK
            return record.end(TrialOutcome.PASSED, (decode, prefill))
        for reason in decision.reasons:
            record.reasons.append(reason)
        # the stage that failed; the tasks never ran where fidelity failed
        record.constraints["fidelity" if decision.failed_stage == "fidelity" else "tasks"] = VIOLATED
        return record.end(TrialOutcome.gate_failed(decision.failed_stage))

    def _dominance_margin(self, baseline: BaselineEvidence) -> float:
        """Stop early only beyond the launch-to-launch noise: max(plan margin, 2x the worst speed floor)."""
        floor = baseline.speed_floor
        worst = max((v for k, v in (floor.rel_diff if floor else ()) if Metric.parse(k).client_timed), default=0.0)
        return max(self.plan.dominated_margin_rel, 2.0 * worst)

    # ---- stages ----

    def _stage(self, record: TrialRecord, name: str) -> None:
        record.stage(name)
        self.progress.stage(name)

    def _stage_name(self, trial: optuna.Trial, name: str) -> None:
        trial.set_user_attr("stage", name)
        self.progress.stage(name)

    def _fits(self, trial: optuna.Trial, config: ServingConfig, record: TrialRecord) -> bool:
        cache_tokens, needed = getattr(config.args, "cache_tokens", None), self.plan.bench_plan.context_tokens_needed
        if isinstance(cache_tokens, int) and cache_tokens < needed:  # bench would refuse it after a launch
            record.fail("fits", f"a {cache_tokens}-token cache cannot hold bench's longest request ({needed} tokens; "
                                "not launched)")
            record.constraints["fits"] = max(VIOLATED, (needed - cache_tokens) / needed)
            trial.set_user_attr("failure", "infeasible")
            return False
        if self.memory is None or self.plan.vram_bytes is None:
            record.constraints["fits"] = OK
            return True
        estimate = self.memory.estimate(config)
        check = check_fit(estimate, Budget(vram_bytes=self.plan.vram_bytes),
                          memory_calibration(self.db, self.plan.study_name))
        trial.set_user_attr("predicted_peak_bytes", estimate.peak_bytes)
        trial.set_user_attr("predicted_peak_calibrated_bytes", check.predicted_peak_bytes)
        if check.fits:
            return True
        record.fail("fits", f"predicted peak {check.predicted_peak_bytes / 2**30:.2f} GiB exceeds the usable "
                            f"{check.budget.usable_bytes / 2**30:.2f} GiB of the {self.plan.vram_bytes / 2**30:.2f} GiB "
                            "budget (not launched)")
        record.constraints["fits"] = max(VIOLATED, check.excess_bytes / self.plan.vram_bytes)
        trial.set_user_attr("failure", "infeasible")
        return False

    def _server(self, trial: optuna.Trial, config: ServingConfig, launch: int = 0):
        if trial.user_attrs.get("stage") != "launch":  # a record that already timed it as a stage
            self._stage_name(trial, "launch")
        return self.plan.server_spec.launch(config, f"trial-{trial.number:04d}-{config.digest[:12]}-{launch}")

    def _bench(self, trial: optuna.Trial, config: ServingConfig, server, launch: int = 0) -> BenchResult:
        """Measure and store; raises Unmeasured when bench cannot run (a context too small, a dead server)."""
        try:
            result = self.plan.fresh_bench(server)
        except (BenchError, ClientError) as exc:
            log.warning("bench failed on trial %d: %s", trial.number, exc)
            self._measure(trial, config, "bench_error", {"error": str(exc)}, launch=launch)
            raise Unmeasured(f"bench failed: {type(exc).__name__}: {exc}") from exc
        self._measure(trial, config, "bench", result.to_dict(), launch=launch)
        self._measure(trial, config, "conditions", conditions(getattr(server, "pid", None)), launch=launch)
        info = server_info(server.url)  # after the bench: its peak follows the bench's longest prompts
        record_provenance(self.db, study=self.plan.study_name, trial=trial.number, config=config,
                          model_manifest_hash=self.plan.model.manifest_hash, server_info=info, bench=result)
        if self.memory is not None:
            peak = (info or {}).get("vram_peak_bytes")  # the engine's own peak
            if peak:
                estimate = self.memory.estimate(config)
                self._measure(trial, config, "memory", {"predicted_peak_bytes": estimate.peak_bytes,
                                                        "measured_peak_bytes": peak}, launch=launch)
                trial.set_user_attr("measured_peak_bytes", peak)
        return result

    def _measure(self, trial, config: ServingConfig, kind: str, payload: dict, launch: int = 0) -> None:
        self.db.add_measurement(study=self.plan.study_name, trial=trial.number, kind=kind,
                                config_digest=config.digest, payload=to_jsonable(payload), launch=launch)

    def _server_failure(self, server) -> str | None:
        failure = server.check()
        return f"{failure.reason}: {failure}" if failure else None

    def _label(self, trial, config: ServingConfig) -> str:
        return f"{self.plan.study_name}:trial-{trial.number}:{config.digest[:12]}"

    def _earlier_baseline(self, trial: optuna.Trial) -> int | None:
        live = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.RUNNING)
        for other in trial.study.get_trials(deepcopy=False, states=live):
            if other.number < trial.number and is_baseline(other):
                return other.number
        return None

    def _original_of(self, trial: optuna.Trial, digest: str) -> int | None:
        """The trial that measures this configuration, when it is not this one: the lowest-numbered live
        (RUNNING or COMPLETE) trial with the same digest, as for the baseline (`_earlier_baseline`).

        Every trial writes its digest before it looks, and a lower-numbered trial still choosing its
        configuration is waited for, so of two workers proposing one configuration at the same moment
        the higher-numbered one always sees the lower one: it is measured exactly once."""
        live = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.RUNNING)
        while True:
            lower = [t for t in trial.study.get_trials(deepcopy=False, states=live) if t.number < trial.number]
            same = [t.number for t in lower if t.user_attrs.get("config_digest") == digest
                    and t.user_attrs.get("duplicate_of") is None]
            if same:
                return min(same)
            choosing = [t.number for t in lower if t.state == optuna.trial.TrialState.RUNNING
                        and "config_digest" not in t.user_attrs]
            if not choosing:
                return None
            log.debug("trial %d waits for trial(s) %s to choose their configuration", trial.number, choosing)
            time.sleep(DUPLICATE_POLL_S)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # stable since Optuna 2.9
                optuna.storages.fail_stale_trials(trial.study)  # a worker killed while choosing stops counting
