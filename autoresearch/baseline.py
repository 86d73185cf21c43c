"""The baseline's evidence, shared by every worker of a study through the study's user attributes.

The baseline trial stores the ids of what it measured (reference, noise-floor measurement, suite
run, bench measurement rows); candidates in any process load them back from the stores.
"""

from __future__ import annotations

from dataclasses import dataclass

import optuna

from autoresearch.db import ResultsDB
from bench import BenchResult, NoiseFloor, mark_stalls
from eval import EvalStore, FidelityMeasurement, Reference, SuiteResult

__all__ = ["BaselineEvidence", "load_baseline", "save_baseline", "stored_speed_floor"]

_KEY = "baseline_evidence"


@dataclass(frozen=True)
class BaselineEvidence:
    label: str
    reference: Reference
    fidelity_floor: FidelityMeasurement
    suite: SuiteResult | None  # None when the run gates on fidelity only
    bench: BenchResult
    speed_floor: NoiseFloor | None
    trial_number: int


def save_baseline(study: optuna.Study, evidence: BaselineEvidence) -> None:
    """Written last, after every piece is stored: its presence means the baseline is complete."""
    study.set_user_attr(_KEY, {
        "label": evidence.label,
        "reference_model": evidence.reference.model_manifest_hash,
        "reference_probes": evidence.reference.probe_set_digest,
        "floor_measurement_id": evidence.fidelity_floor.measurement_id,
        "suite_run_id": evidence.suite.suite_run_id if evidence.suite else None,
        "trial": evidence.trial_number,
        "speed_floor": evidence.speed_floor.to_dict() if evidence.speed_floor else None,
    })


def load_baseline(study: optuna.Study, store: EvalStore, db: ResultsDB, study_name: str) -> BaselineEvidence | None:
    data = study.user_attrs.get(_KEY)
    if data is None:
        return None
    rows = db.measurements(study=study_name, kind="bench", trial=data["trial"])
    # records from before bench set stalled runs aside are judged by the same rule as new ones
    bench = mark_stalls(BenchResult.from_dict(next(r for r in rows if r["launch"] == 0)["payload"]))
    speed_floor = stored_speed_floor(study)
    reference = store.load_reference(data["reference_model"], data["reference_probes"])
    floor_metrics = store.load_measurement(data["floor_measurement_id"])
    floor = FidelityMeasurement(measurement_id=data["floor_measurement_id"], role="noise_floor",
                                label=data["label"] + "#2", metrics=floor_metrics, per_probe=(), elapsed_s=0.0)
    return BaselineEvidence(label=data["label"], reference=reference, fidelity_floor=floor,
                            suite=store.load_suite_result(data["suite_run_id"]) if data["suite_run_id"] else None, bench=bench, speed_floor=speed_floor,
                            trial_number=data["trial"])


def stored_speed_floor(study: optuna.Study) -> NoiseFloor | None:
    """The baseline's launch-to-launch speed floor, as its trial stored it (None before it ran)."""
    data = (study.user_attrs.get(_KEY) or {}).get("speed_floor")
    return NoiseFloor(rel_diff=tuple(sorted(data.items()))) if data else None
