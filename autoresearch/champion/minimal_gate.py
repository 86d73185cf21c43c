"""The minimal champion judged like any candidate before `export` may write it.

Most removals restore defaults, which cannot cost intelligence, but a removal can expose an
interaction (a setting that was harmless only beside another). So the minimal champion goes through
the gate's tiers as a candidate's trial does: a fresh launch, the fidelity probes against the
baseline's reference and noise floor, then, where the study has a task suite and fidelity passed, the
task tier against the baseline's lazy answers (its own answers on disk under `answers/minimal-<digest>`).
It leaves one decision row, labelled `<study>:minimal-<digest>` (one that could not be judged too, with why), and its verdict is stored with the
minimization (minimal_champion.record_gate): export writes the minimal champion only once it passed.
The subset of it that TabbyAPI can run (autoresearch.champion.minimal_champion) is judged alike
(`gate_tabbyapi_subset`, `<study>:tabbyapi-<digest>`), and `export --format tabbyapi` says its verdict.
A minimal champion that could not be judged (its launch failed, the suite broke) did not pass. One not shown
faster than the baseline (autoresearch.champion.minimization.BaselineCheck) is not judged at all: export writes the
confirmed champion in its place, and so the gate's hour goes to nothing (its verdict says it was not run, and why).

Usage:
    verdict = gate_minimal(plan, study, db, store, tier, minimization)   # {"passed": ..., "reason": ...}
    gate_tabbyapi_subset(plan, study, db, store, tier, minimization)     # None: TabbyAPI runs it whole
"""

from __future__ import annotations

import contextlib
import logging

import optuna

from autoresearch.champion.minimal_champion import record_gate
from autoresearch.champion.minimization import Minimization
from autoresearch.checks.judging import TierRunner
from autoresearch.ground.db import ResultsDB
from autoresearch.ground.errors import BaselineFailed
from autoresearch.ground.plan import RunPlan
from autoresearch.measures.baseline import load_baseline
from eval import EvalStore, gate_candidate, record_unjudged
from eval.errors import EvalError
from eval.fidelity import measure_fidelity
from serving.config import ServingConfig
from serving.errors import LaunchError

__all__ = ["gate_config", "gate_minimal", "gate_tabbyapi_subset"]

log = logging.getLogger(__name__)


def gate_minimal(plan: RunPlan, study: optuna.Study, db: ResultsDB, store: EvalStore, tier: TierRunner | None,
                 minimization: Minimization) -> dict:
    """The minimal champion's gate verdict (stored; a verdict already stored is returned without a launch).

    Raises:
        BaselineFailed: the study holds no baseline evidence (a confirmed champion implies one).
    """
    stored = minimization.extra.get("gate")
    if stored is not None:
        return stored
    if (unexported := _not_faster(minimization)) is not None:
        return record_gate(study, **unexported)
    return record_gate(study, **gate_config(plan, study, db, store, tier, minimization.minimal, "minimal"))


def _not_faster(minimization: Minimization) -> dict | None:
    """The verdict of a gate not run because the minimal champion was not shown faster than the baseline (None:
    it was, or it is the confirmed champion)."""
    versus = minimization.versus_baseline
    if versus is None or versus.faster:
        return None
    return {"passed": False, "judged": False,
            "reason": f"the minimal champion was not shown faster than the baseline ({versus.text()}); export writes "
                      "the confirmed champion"}


def gate_tabbyapi_subset(plan: RunPlan, study: optuna.Study, db: ResultsDB, store: EvalStore, tier: TierRunner | None,
                         minimization: Minimization) -> dict | None:
    """The gate verdict of the subset `export --format tabbyapi` writes (the one the minimization chose), judged
    like any candidate: what TabbyAPI cannot express is left at the value TabbyAPI runs, and a removal can
    expose an interaction. None when TabbyAPI expresses the minimal champion whole (no subset)."""
    subset = minimization.extra.get("tabbyapi_subset")
    if not subset or not subset.get("digest"):
        return None
    if subset.get("gate") is not None:
        return subset["gate"]
    if subset.get("of", "minimal") == "minimal" and (unexported := _not_faster(minimization)) is not None:
        return record_gate(study, **unexported, of="tabbyapi_subset")  # a subset of what export does not write
    verdict = gate_config(plan, study, db, store, tier, ServingConfig.from_dict(subset["config"]), "tabbyapi")
    return record_gate(study, **verdict, of="tabbyapi_subset")


def gate_config(plan: RunPlan, study: optuna.Study, db: ResultsDB, store: EvalStore, tier: TierRunner | None,
                config: ServingConfig, kind: str) -> dict:
    """One configuration that is no trial, judged as a candidate under the name `<kind>-<digest>`: its verdict
    ({"passed", "reason", "decision_id"}), with its one decision row whatever happened.

    Raises:
        BaselineFailed: the study holds no baseline evidence (a confirmed champion implies one).
    """
    name = f"{kind}-{config.digest[:12]}"
    label = f"{plan.study_name}:{name}"
    baseline = load_baseline(study, store, db, plan.study_name)
    if baseline is None:  # a champion implies a measured baseline; a study without one cannot judge anything
        raise BaselineFailed(f"the baseline's evidence is missing: {name} cannot be judged")
    gate = None
    try:
        with contextlib.ExitStack() as stack:
            server = stack.enter_context(plan.server_spec.launch(config, name))
            fidelity = measure_fidelity(server.url, baseline.reference, store=store, role="candidate", label=label)
            gate = gate_candidate(store, model_manifest_hash=plan.model.manifest_hash, candidate_label=label,
                                  baseline_label=baseline.label, policy=plan.gate_policy,
                                  floor=baseline.fidelity_floor, candidate_fidelity=fidelity,
                                  tiers_follow=tier is not None)
            if tier is not None and gate.decision.passed:  # the tier stops this server before the baseline's
                gate, _ = tier.judge(study, trial=None, label=label, config=config, baseline=baseline,
                                     fidelity=fidelity, server=server, release=stack.close, name=name)
    except (LaunchError, EvalError, BaselineFailed) as exc:
        log.error("%s could not be judged: %s", name, exc)
        reason = f"{type(exc).__name__}: {exc}"
        unjudged = record_unjudged(store, model_manifest_hash=plan.model.manifest_hash, candidate_label=label,
                                   baseline_label=baseline.label, policy=plan.gate_policy, reason=reason,
                                   stage="fidelity" if gate is None else "tasks",
                                   fidelity=gate.decision.fidelity if gate is not None else None,
                                   replace_id=gate.decision_id if gate is not None else None)
        return {"passed": False, "decision_id": unjudged.decision_id, "reason": f"it could not be judged: {reason}"}
    tiers = "fidelity and tasks" if tier is not None else "fidelity"
    return {"passed": gate.decision.passed, "decision_id": gate.decision_id,
            "reason": f"judged as a candidate ({tiers})" if gate.decision.passed else "; ".join(gate.decision.reasons)}
