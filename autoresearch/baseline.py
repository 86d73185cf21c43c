"""The baseline protocol: what every candidate is judged against, measured once and shared.

`run_baseline` is the protocol, used by the loop's baseline trial and by `python -m autoresearch sweep`:

- launch 0: speed first (a baseline that cannot be measured stops the study: BaselineUnmeasured, as
  it does where its second launch cannot be measured), then the fidelity reference (the stored one
  for this model and probe set, else captured here), then the baseline's first answers on the task
  suite (autoresearch.task_tier: the fewest tasks any walk needs; the rest is answered lazily, as far
  as candidates' walks need it; first answers with failed episodes are answered once more, and answers
  that still cannot be the reference stop the study);
- launch 1, a fresh process of the same configuration: speed again, then the fidelity noise floor.
  Bench comes first in both launches, as in every candidate's: a server warmed by the fidelity
  probes decoded 27% faster at 1K on the real 0.5B, and that order effect became "noise".

Launch 0 is skipped where it has nothing to do (no speed, no suite, a stored reference reused).

The baseline trial stores the ids of what it measured (reference, noise-floor measurement, suite
run, bench measurement rows) and its speed floor in the study's user attributes (`save_baseline`); candidates in any
process load them back (`load_baseline`) or, while another worker is still measuring it, wait
(`wait_for_baseline`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import optuna

from autoresearch.db import ResultsDB
from autoresearch.errors import BaselineNotReady, BaselineUnmeasured, Unmeasured
from bench import BenchResult, NoiseFloor, mark_stalls
from eval import (
    EvalStore,
    FidelityMeasurement,
    MissingReference,
    Reference,
    SuiteResult,
    capture_reference,
    measure_fidelity,
)
from eval.fidelity import load_fidelity_measurement
from eval.probes import ProbeSet

__all__ = ["BaselineEvidence", "BaselineRun", "load_baseline", "measured_or_stop", "run_baseline",
           "save_baseline", "stored_speed_floor", "wait_for_baseline"]

log = logging.getLogger(__name__)
_KEY = "baseline_evidence"
M = TypeVar("M")


# ---- the protocol ----

@dataclass(frozen=True)
class BaselineRun(Generic[M]):
    reference: Reference
    fidelity_floor: FidelityMeasurement
    suite: SuiteResult | None  # None where no suite was run
    measured: tuple[M, M] | None  # what `measure` gave in launch 0 and launch 1 (None without `measure`)


def run_baseline(
    *,
    serve: Callable[[int], AbstractContextManager[Any]],
    store: EvalStore,
    probe_set: ProbeSet,
    model_manifest_hash: str,
    label: str,
    floor_label: str,
    replace_reference: bool = False,
    measure: Callable[[Any, int], M] | None = None,
    suite: Callable[[Any], SuiteResult] | None = None,
    stage: Callable[[str], None] = lambda name: None,
) -> BaselineRun[M]:
    """Run the protocol above. `serve(launch)` starts a fresh server (a context manager giving one with
    `.url`); `measure(server, launch)` measures its speed and raises BaselineUnmeasured where it cannot
    (`measured_or_stop`); `suite(server)` gives the baseline's first answers on the task suite and raises
    BaselineUnmeasured where they cannot be the reference (TaskTier.baseline_first); `stage(name)` hears
    each stage as it begins.

    Raises:
        BaselineUnmeasured: the speed or the task suite cannot be the reference (the study stops).
        EvalError, LaunchError: from eval and the launches, unchanged.
    """
    reference = None if replace_reference else _stored_reference(store, model_manifest_hash, probe_set)
    first = suite_result = None
    if reference is None or measure is not None or suite is not None:
        with serve(0) as server:
            if measure is not None:
                stage("bench")  # first: a baseline that cannot be measured stops the study at once
                first = measure(server, 0)
            stage("reference")
            if reference is None:
                reference = capture_reference(server.url, probe_set, store=store,
                                              model_manifest_hash=model_manifest_hash, label=label,
                                              replace=replace_reference)
            if suite is not None:
                stage("tasks")
                suite_result = suite(server)
    stage("noise floor")
    with serve(1) as server:
        second = measure(server, 1) if measure is not None else None  # bench first, as in launch 0
        floor = measure_fidelity(server.url, reference, store=store, role="noise_floor", label=floor_label)
    return BaselineRun(reference=reference, fidelity_floor=floor, suite=suite_result,
                       measured=(first, second) if measure is not None else None)


def measured_or_stop(measure: Callable[[], M], *, launch: int, server_failure: Callable[[], str | None]) -> M:
    """The baseline's measurement, or BaselineUnmeasured: nothing can be judged against nothing."""
    try:
        return measure()
    except Unmeasured as exc:
        failure = server_failure()
        reason = f"the baseline could not be measured (launch {launch}): {exc}" + (f" ({failure})" if failure else "")
        raise BaselineUnmeasured(reason) from exc


def _stored_reference(store: EvalStore, model_manifest_hash: str, probe_set: ProbeSet) -> Reference | None:
    try:
        return store.load_reference(model_manifest_hash, probe_set.digest)
    except MissingReference:
        return None


# ---- the evidence, shared by every worker of a study ----

@dataclass(frozen=True)
class BaselineEvidence:
    label: str
    reference: Reference
    fidelity_floor: FidelityMeasurement
    suite: SuiteResult | None  # None when the run gates on fidelity only
    bench: BenchResult  # launch 0's: the request-time mix every candidate's speed-up is weighed by
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
    reference = store.load_reference(data["reference_model"], data["reference_probes"])
    return BaselineEvidence(label=data["label"], reference=reference,
                            fidelity_floor=load_fidelity_measurement(store, data["floor_measurement_id"]),
                            suite=store.load_suite_result(data["suite_run_id"]) if data["suite_run_id"] else None,
                            bench=bench, speed_floor=stored_speed_floor(study), trial_number=data["trial"])


def stored_speed_floor(study: optuna.Study) -> NoiseFloor | None:
    """The baseline's launch-to-launch speed floor, as its trial stored it (None before it ran)."""
    data = (study.user_attrs.get(_KEY) or {}).get("speed_floor")
    return NoiseFloor(rel_diff=tuple(sorted(data.items()))) if data else None


def wait_for_baseline(trial: optuna.Trial, *, store: EvalStore, db: ResultsDB, study_name: str,
                      baseline_params: Callable[[], dict]) -> BaselineEvidence:
    """Candidates are judged against the baseline's evidence; another worker may still be making it.

    Where no worker is measuring it, the baseline is enqueued (unless it waits already), then this
    candidate after it, and BaselineNotReady ends this trial.
    """
    study = trial.study
    while True:
        evidence = load_baseline(study, store, db, study_name)
        if evidence is not None:
            return evidence
        optuna.storages.fail_stale_trials(study)  # a baseline whose worker was killed is retried
        states = {t.state for t in study.get_trials(deepcopy=False) if t.user_attrs.get("role") == "baseline"}
        if optuna.trial.TrialState.RUNNING not in states:
            if optuna.trial.TrialState.WAITING not in states:
                study.enqueue_trial(baseline_params(), user_attrs={"role": "baseline"})
            study.enqueue_trial(trial.params, user_attrs={"role": "candidate", "deferred_from": trial.number})
            log.info("trial %d deferred: the baseline runs first, then this configuration", trial.number)
            raise BaselineNotReady(f"trial {trial.number} deferred: the baseline must run first")
        time.sleep(2.0)  # another worker is measuring the baseline
