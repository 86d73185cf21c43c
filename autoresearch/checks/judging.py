"""The task tier as the loop runs it: eval answers each chunk, servers launch as the walks need them,
and each judged candidate leaves one gate decision row.

The rule of who is judged and the lazy baseline are autoresearch.checks.task_tier's; this module connects
them to the real parts (eval.runner.answer_taskset, autoresearch.ground.servers, the results store), so
that trial.py (scope every) and the finalists' stage (scope finalists) judge the same way.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

import optuna

from autoresearch.checks.task_tier import Judgment, TaskTier
from autoresearch.checks.verdicts import JUDGED, PENDING, record_task_verdict
from autoresearch.ground.db import ResultsDB
from autoresearch.ground.errors import BaselineFailed
from autoresearch.ground.plan import RunPlan
from autoresearch.measures.baseline import BaselineEvidence, load_baseline
from eval import EvalStore, gate_candidate, record_unjudged
from eval.errors import EvalError
from eval.fidelity import FidelityMeasurement, load_fidelity_measurement
from eval.gate import GateRecord
from eval.records import SuiteResult, TasksetResult
from eval.runner import answer_taskset
from eval.suites import SuiteSpec, TasksetSpec
from openai_client import Endpoint
from results import to_jsonable
from serving.config import ServingConfig
from serving.errors import LaunchError

__all__ = ["JUDGED", "PENDING", "TierRunner"]

log = logging.getLogger(__name__)
PASSED = "task tier passed (judged by the finalists' stage)"
SMOKE_RUN = ("task tier smoke run completed on the finalists' stage (--task-tier smoke: its answers recorded, "
             "nothing judged)")


class TierRunner:
    """One per loop process: the study's lazy baseline and the judgments against it."""

    def __init__(self, plan: RunPlan, suite: SuiteSpec, store: EvalStore, db: ResultsDB):
        self.plan = plan
        self.suite = suite
        self.store = store
        self.db = db
        self.answers_dir = (plan.study_dir / "answers").resolve()
        self.tier = TaskTier(suite, plan.gate_policy.tasks, answer=self._answer, baseline_dir=self.answers_dir / "baseline")
        self._launches = 0

    def _answer(self, server: Any, spec: TasksetSpec, answered: frozenset[str], chunk_dir: Path,
                stop_when) -> tuple[TasksetResult, bool]:
        return answer_taskset(self.suite, spec, Endpoint(url=server.url), run_dir=chunk_dir, answered=answered,
                              stop_when=stop_when)

    def _serve(self, config: ServingConfig, name: str):
        self._launches += 1
        return self.plan.server_spec.launch(config, f"{name}-{config.digest[:12]}-{self._launches}")

    # ---- the baseline's trial ----

    def baseline_first(self, server: Any, *, label: str, trial: int, config_digest: str) -> SuiteResult:
        """The baseline's first answers (TaskTier.baseline_first), stored as a suite run and a measurement."""
        started = time.monotonic()
        result = self.tier.baseline_first(server)
        stored = self._store_suite(result, label=label, url=server.url)
        self.db.add_measurement(study=self.plan.study_name, trial=trial, kind="suite", config_digest=config_digest,
                                payload=to_jsonable({"suite_run_id": stored.suite_run_id, "suite": stored.suite,
                                                     "tasksets": stored.tasksets, "lazy": True,
                                                     "elapsed_s": round(time.monotonic() - started, 3)}))
        return stored

    # ---- a candidate ----

    def judge(self, study: optuna.Study, *, trial: int | None, label: str, config: ServingConfig,
              baseline: BaselineEvidence, fidelity: FidelityMeasurement, server: Any = None, release=None,
              replace_id: int | None = None, name: str | None = None) -> tuple[GateRecord, Judgment]:
        """Judge one candidate on the task tier and save its one decision row (fidelity and tasks together).
        `name` (default `trial-NNNN`) names its answers on disk and its servers' logs: a candidate that is no
        trial (the minimal champion) has its own.

        Raises:
            BaselineFailed: the baseline's answers break its rules.
            TasksetRunError, EvalError, LaunchError: unchanged (a smoke run that does not complete).
        """
        started = time.monotonic()
        baseline_config = ServingConfig.from_dict(study.trials[baseline.trial_number].user_attrs["config"])
        name = name or f"trial-{trial:04d}"
        judgment = self.tier.judge(self.answers_dir / name,
                                   serve_candidate=lambda: self._serve(config, f"tasks-{name}"),
                                   serve_baseline=lambda: self._serve(baseline_config, f"tasks-baseline-for-{name}"),
                                   server=server, release=release)
        base = self._store_suite(judgment.baseline, label=baseline.label + " (answers paired with " + label + ")")
        cand = self._store_suite(judgment.candidate, label=label)
        self.db.add_measurement(study=self.plan.study_name, trial=trial, kind="suite", config_digest=config.digest,
                                payload=to_jsonable({"suite_run_id": cand.suite_run_id, "suite": cand.suite,
                                                     "tasksets": cand.tasksets, "lazy": True,
                                                     "baseline_answered": judgment.baseline_answered,
                                                     "candidate_answered": judgment.candidate_answered,
                                                     "walks": {v.name: v.tasks_used for v in judgment.verdicts},
                                                     "elapsed_s": round(time.monotonic() - started, 3)}))
        gate = gate_candidate(self.store, model_manifest_hash=self.plan.model.manifest_hash, candidate_label=label,
                              baseline_label=baseline.label, policy=self.plan.gate_policy,
                              floor=baseline.fidelity_floor, candidate_fidelity=fidelity, baseline_suite=base,
                              candidate_suite=cand, planned_tasks=judgment.planned, replace_id=replace_id)
        return gate, judgment

    def judge_pending(self, study: optuna.Study, t: optuna.trial.FrozenTrial) -> dict:
        """The finalists' stage: judge a finalist whose task tier is pending; a verdict for ar_finalists, also
        written back into the trial (autoresearch.checks.verdicts) where the sampler, the finalists' selection, the
        report and optuna-dashboard read feasibility. One the tier could not judge (a smoke run that did not
        complete, a launch that failed, baseline answers that broke its rules) did not pass."""
        verdict = self._judge_pending(study, t)
        record_task_verdict(study, t.number, passed=verdict["passed"], reasons=verdict["reasons"])
        return verdict

    def _judge_pending(self, study: optuna.Study, t: optuna.trial.FrozenTrial) -> dict:
        try:
            baseline = load_baseline(study, self.store, self.db, self.plan.study_name)
            gate, judgment = self.judge(
                study, trial=t.number, label=t.user_attrs["gate_label"],
                config=ServingConfig.from_dict(t.user_attrs["config"]), baseline=baseline,
                fidelity=load_fidelity_measurement(self.store, t.user_attrs["fidelity_measurement_id"]),
                replace_id=t.user_attrs.get("gate_decision_id"))
        except (BaselineFailed, EvalError, LaunchError) as exc:
            log.error("the task tier could not judge trial %d: %s", t.number, exc)
            reason = f"{type(exc).__name__}: {exc}"  # its one decision row says so, in place of fidelity's pass
            row = record_unjudged(self.store, model_manifest_hash=self.plan.model.manifest_hash,
                                  candidate_label=t.user_attrs["gate_label"], baseline_label=f"{self.plan.study_name}:baseline",
                                  policy=self.plan.gate_policy, stage="tasks", reason=reason,
                                  replace_id=t.user_attrs.get("gate_decision_id"))
            return {"passed": False, "decision_id": row.decision_id, "reasons": [reason]}
        passed = [PASSED if self.plan.gate_policy.tasks.decides else SMOKE_RUN]  # a smoke run judged nothing
        return {"passed": gate.decision.passed, "decision_id": gate.decision_id,
                "reasons": passed if gate.decision.passed else list(gate.decision.reasons),
                "tasksets": [{"name": v.name, "decision": v.decision, "tasks_used": v.tasks_used, "lost": v.lost,
                              "gained": v.gained, "power": v.power} for v in judgment.verdicts],
                "baseline_answered": judgment.baseline_answered, "candidate_answered": judgment.candidate_answered}

    def _store_suite(self, result: SuiteResult, *, label: str, url: str = "") -> SuiteResult:
        run_id = self.store.save_suite_result(result, label=label, base_url=url, plan=dataclasses.asdict(self.suite),
                                              provenance={"lazy": True, "policy": repr(self.plan.gate_policy.tasks)},
                                              model_manifest_hash=self.plan.model.manifest_hash)
        return dataclasses.replace(result, suite_run_id=run_id)
