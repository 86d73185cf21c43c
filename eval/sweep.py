"""A standalone fidelity study: launch the baseline twice and each candidate once, measure, decide, record.

This is what the issue's GPU record runs (KV-cache 8/8, 4/4, 2/2; EXL3_INT8_GEMV 0 against 2): the
reference is captured on one baseline launch, the noise floor is the baseline again in a *fresh*
launch, and every candidate runs in its own fresh process (EXL3_* variables are read at import).
It composes serving's launcher with this package; the autoresearch loop does the same per trial.

Usage:
    python -m eval fidelity sweep --model DIR --baseline base.json --candidate kv8=kv8.json ... --db sqlite:///results.db
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from eval.decision import FidelityPolicy, GatePolicy
from eval.fidelity import FidelityMeasurement, capture_reference, measure_fidelity
from eval.gate import gate_candidate
from eval.probes import ProbeSet
from eval.records import Reference
from eval.store import EvalStore
from serving.manifest import manifest_hash

__all__ = ["SweepOutcome", "manifest_digest", "run_sweep"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class SweepOutcome:
    label: str
    measurement: FidelityMeasurement
    passed: bool
    decision_id: int
    reasons: tuple[str, ...]


def manifest_digest(model_dir: Path) -> str:
    """The model's manifest hash (serving.manifest), for callers that have none of their own: the same
    hash the loop records, so a reference captured here is found by the loop and the other way round."""
    return manifest_hash(model_dir)


def run_sweep(
    *,
    model_dir: Path,
    baseline_config_path: Path,
    candidates: list[tuple[str, Path]],
    probe_set: ProbeSet,
    store: EvalStore,
    model_manifest_hash: str,
    log_dir: Path,
    policy: FidelityPolicy,
    replace_reference: bool = False,
    startup_timeout_s: float = 900.0,
) -> tuple[Reference, FidelityMeasurement, list[SweepOutcome]]:
    """Capture (or reuse) the reference, measure the floor in a fresh launch, then each candidate."""
    from eval.errors import MissingReference
    from serving.config import ServingConfig
    from serving.launcher import LaunchSpec, free_port, launch

    def spec(config_path: Path, tag: str) -> LaunchSpec:
        config = ServingConfig.from_json(config_path.read_text())
        return LaunchSpec(
            model_dir=model_dir,
            config=config,
            port=free_port(),
            log_path=log_dir / f"{tag}.log",
            startup_timeout_s=startup_timeout_s,
        )

    log_dir.mkdir(parents=True, exist_ok=True)
    reference: Reference | None = None
    if not replace_reference:
        try:
            reference = store.load_reference(model_manifest_hash, probe_set.digest)
            log.info("reusing stored reference %s", reference.reference_id)
        except MissingReference:
            reference = None
    if reference is None:
        with launch(spec(baseline_config_path, "baseline-reference")) as server:
            reference = capture_reference(
                server.url,
                probe_set,
                store=store,
                model_manifest_hash=model_manifest_hash,
                label=f"baseline:{baseline_config_path.name}",
                replace=replace_reference,
            )
    with launch(spec(baseline_config_path, "baseline-floor")) as server:
        floor = measure_fidelity(
            server.url,
            reference,
            store=store,
            role="noise_floor",
            label=f"baseline:{baseline_config_path.name}",
        )
    outcomes = []
    for label, path in candidates:
        with launch(spec(path, f"candidate-{label}")) as server:
            measured = measure_fidelity(server.url, reference, store=store, role="candidate", label=label)
        record = gate_candidate(
            store,
            model_manifest_hash=model_manifest_hash,
            candidate_label=label,
            baseline_label=f"baseline:{baseline_config_path.name}",
            policy=GatePolicy(fidelity=policy),
            floor=floor,
            candidate_fidelity=measured,
        )
        outcomes.append(
            SweepOutcome(
                label=label,
                measurement=measured,
                passed=record.decision.passed,
                decision_id=record.decision_id,
                reasons=record.decision.reasons,
            )
        )
    return reference, floor, outcomes
