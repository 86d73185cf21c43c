"""The gate as the autoresearch loop calls it: decide on the evidence given, store decision and evidence.

Tiers run cheapest first. The loop measures fidelity; when `decide_fidelity` fails it calls
`gate_candidate` with the fidelity evidence alone (the suites are skipped); otherwise it runs the
suite on the candidate and calls `gate_candidate` with both. A call stores one eval_decisions row with
the policy, the verdicts and the ids of the measurements and suite runs it used, except a pass with
`tiers_follow` (a later tier runs next): the loop saves one row per candidate, after the last tier that
ran, so a candidate that passed fidelity and then failed its tasks never leaves a passing row behind.

Usage:
    record = gate_candidate(store, model_manifest_hash=h, candidate_label=digest, baseline_label="baseline",
                            policy=GatePolicy(), floor=floor, candidate_fidelity=cand,
                            baseline_suite=base_run, candidate_suite=cand_run)
    record.decision.passed
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from eval.decision import FidelityVerdict, GateDecision, GatePolicy, compare_taskset, decide, decide_fidelity
from eval.errors import EvalConfigError
from eval.fidelity import FidelityMeasurement
from eval.records import SuiteResult
from eval.store import EvalStore

__all__ = ["GateRecord", "gate_candidate", "record_unjudged"]


@dataclass(frozen=True, kw_only=True, slots=True)
class GateRecord:
    decision_id: int | None  # the eval_decisions row; None where the decision was not saved
    decision: GateDecision


def gate_candidate(
    store: EvalStore,
    *,
    model_manifest_hash: str,
    candidate_label: str,
    baseline_label: str,
    policy: GatePolicy,
    floor: FidelityMeasurement | None = None,
    candidate_fidelity: FidelityMeasurement | None = None,
    baseline_suite: SuiteResult | None = None,
    candidate_suite: SuiteResult | None = None,
    tiers_follow: bool = False,
    planned_tasks: Mapping[str, int | None] | None = None,
    replace_id: int | None = None,
) -> GateRecord:
    """Decide on whatever tiers have evidence and store the decision (`replace_id`: in place of an earlier row
    of this candidate); with `tiers_follow`, a pass is not stored (the tier that runs next stores the row). `planned_tasks`: per taskset, the size the power is computed on
    where the suites hold only the paired prefix a lazy baseline answered (eval.task_decision).

    Raises:
        EvalConfigError: half of a tier's evidence is missing, or the suites are not comparable.
    """
    if (floor is None) != (candidate_fidelity is None):
        raise EvalConfigError("fidelity needs both the noise floor and the candidate measurement")
    if (baseline_suite is None) != (candidate_suite is None):
        raise EvalConfigError("the task tier needs both the baseline's and the candidate's suite results")
    fidelity = None
    if floor is not None and candidate_fidelity is not None:
        fidelity = decide_fidelity(candidate_fidelity.metrics, floor.metrics, policy.fidelity)
    tasksets = []
    if baseline_suite is not None and candidate_suite is not None:
        if baseline_suite.suite != candidate_suite.suite:
            raise EvalConfigError(
                f"suite {candidate_suite.suite!r} cannot be paired with baseline suite {baseline_suite.suite!r}"
            )
        for result in candidate_suite.tasksets:
            try:
                base = baseline_suite.taskset(result.name)
            except KeyError as exc:
                raise EvalConfigError(str(exc)) from None
            tasksets.append(compare_taskset(base, result, policy.tasks, tasksets=len(baseline_suite.tasksets),
                                            planned_tasks=(planned_tasks or {}).get(result.name)))
        missing = [t.name for t in baseline_suite.tasksets if t.name not in {r.name for r in candidate_suite.tasksets}]
        if missing and not any(v.decision == "rejected" for v in tasksets):
            raise EvalConfigError(
                f"the candidate's suite run has no result for {missing}, and no taskset it ran was rejected"
            )
    decision = decide(fidelity=fidelity, tasksets=tasksets)
    if tiers_follow and decision.passed:
        return GateRecord(decision_id=None, decision=decision)
    decision_id = store.save_decision(
        decision,
        model_manifest_hash=model_manifest_hash,
        candidate_label=candidate_label,
        baseline_label=baseline_label,
        policy=policy,
        floor_measurement_id=floor.measurement_id if floor else None,
        candidate_measurement_id=candidate_fidelity.measurement_id if candidate_fidelity else None,
        baseline_suite_run_id=baseline_suite.suite_run_id if baseline_suite else None,
        candidate_suite_run_id=candidate_suite.suite_run_id if candidate_suite else None,
        extra_evidence={
            "floor_metrics": floor.metrics if floor else None,
            "candidate_metrics": candidate_fidelity.metrics if candidate_fidelity else None,
            "planned_tasks": dict(planned_tasks) if planned_tasks else None,
        },
        replace_id=replace_id,
    )
    return GateRecord(decision_id=decision_id, decision=decision)


def record_unjudged(store: EvalStore, *, model_manifest_hash: str, candidate_label: str, baseline_label: str,
                    policy: GatePolicy, stage: Literal["fidelity", "tasks"], reason: str,
                    fidelity: FidelityVerdict | None = None, replace_id: int | None = None) -> GateRecord:
    """The one decision row of a candidate a tier could not judge (its launch failed, its suite's server died):
    not passed, at the `stage` that could not run, with the reason, never a silent gap. `fidelity`: the
    verdict of a fidelity tier that did run, kept as evidence; `replace_id`: in place of its earlier row."""
    decision = GateDecision(passed=False, failed_stage=stage, reasons=(f"{stage} could not be judged: {reason}",),
                            fidelity=fidelity, tasksets=())
    decision_id = store.save_decision(decision, model_manifest_hash=model_manifest_hash, candidate_label=candidate_label,
                                      baseline_label=baseline_label, policy=policy,
                                      extra_evidence={"unjudged": reason}, replace_id=replace_id)
    return GateRecord(decision_id=decision_id, decision=decision)
