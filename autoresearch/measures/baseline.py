"""What every candidate is judged against: the baseline's evidence, measured once and shared.

The baseline trial measures it in two launches (the protocol: `TrialRunner._baseline_evidence` in
autoresearch.trial.runner; `python -m autoresearch sweep` runs it without speed and tasks), with the pieces
here: the stored reference that spares a capture (`stored_reference`), and the rule that a baseline
that cannot be measured stops the study (`measured_or_stop`).

The baseline trial stores the ids of what it measured (reference, noise-floor measurement, suite
run, bench measurement rows) and its speed and energy floors in the study's user attributes (`save_baseline`); candidates in any
process load them back (`load_baseline`) or, while another worker is still measuring it, wait
(`wait_for_baseline`).
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import optuna

from autoresearch.ground.db import ResultsDB
from autoresearch.ground.errors import BaselineNotReady, BaselineUnmeasured, Unmeasured
from autoresearch.ground.outcome import TrialOutcome
from autoresearch.ground.study import fail_gone_workers, is_baseline
from bench import BenchResult, NoiseFloor, mark_stalls
from eval import EvalStore, FidelityMeasurement, MissingReference, Reference, SuiteResult
from eval.fidelity import load_fidelity_measurement
from eval.probes import ProbeSet

__all__ = ["BaselineEvidence", "load_baseline", "measured_or_stop", "save_baseline", "stored_energy_floor",
           "stored_reference", "stored_speed_floor", "wait_for_baseline"]

log = logging.getLogger(__name__)
_KEY = "baseline_evidence"
M = TypeVar("M")


# ---- the protocol's pieces ----

def measured_or_stop(measure: Callable[[], M], *, launch: int, server_failure: Callable[[], str | None]) -> M:
    """The baseline's measurement, or BaselineUnmeasured: nothing can be judged against nothing."""
    try:
        return measure()
    except Unmeasured as exc:
        failure = server_failure()
        reason = f"the baseline could not be measured (launch {launch}): {exc}" + (f" ({failure})" if failure else "")
        raise BaselineUnmeasured(reason) from exc


def stored_reference(store: EvalStore, model_manifest_hash: str, probe_set: ProbeSet) -> Reference | None:
    """The reference stored for this model and probe set; None: the baseline's launch 0 captures one."""
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
    # the same two launches' floor of tokens per joule per point (--rank-by energy judges with it);
    # None: no energy measured in either launch (then an energy-ranked round needs two baseline launches)
    energy_floor: NoiseFloor | None = None


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
        "energy_floor": evidence.energy_floor.to_dict() if evidence.energy_floor else None,
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
                            bench=bench, speed_floor=stored_speed_floor(study), trial_number=data["trial"],
                            energy_floor=stored_energy_floor(study))


def stored_speed_floor(study: optuna.Study) -> NoiseFloor | None:
    """The baseline's launch-to-launch speed floor, as its trial stored it (None before it ran)."""
    return _stored_floor(study, "speed_floor")


def stored_energy_floor(study: optuna.Study) -> NoiseFloor | None:
    """The baseline's launch-to-launch floor of tokens per joule (None before it ran, or where neither
    launch measured energy, or in a study whose baseline ran before energy had a floor)."""
    return _stored_floor(study, "energy_floor")


def _stored_floor(study: optuna.Study, key: str) -> NoiseFloor | None:
    data = (study.user_attrs.get(_KEY) or {}).get(key)
    return NoiseFloor(rel_diff=tuple(sorted(data.items()))) if data else None


def wait_for_baseline(trial: optuna.Trial, *, store: EvalStore, db: ResultsDB, study_name: str,
                      baseline_params: Callable[[], dict], grace_s: float | None = None) -> BaselineEvidence:
    """Candidates are judged against the baseline's evidence; another worker may still be making it (said once,
    with the worker and how long a stopped one takes to be retried; a worker of this host that is gone is
    retried at once: autoresearch.ground.study.fail_gone_workers).

    Where no worker is measuring it, the baseline is enqueued (unless it waits already), then this
    candidate after it (with its lever or --enqueue mark), and BaselineNotReady ends this trial PRUNED,
    its outcome `deferred`: a trial that waited in the queue never becomes a FAIL.
    """
    study = trial.study
    said = None
    while True:
        evidence = load_baseline(study, store, db, study_name)
        if evidence is not None:
            return evidence
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # stable since Optuna 2.9
            optuna.storages.fail_stale_trials(study)  # a baseline whose worker was killed is retried
        fail_gone_workers(study)  # at once where that worker was on this host
        baselines = [t for t in study.get_trials(deepcopy=False) if is_baseline(t)]
        running = [t for t in baselines if t.state == optuna.trial.TrialState.RUNNING]
        if not running:
            if not any(t.state == optuna.trial.TrialState.WAITING for t in baselines):
                study.enqueue_trial(baseline_params(), user_attrs={"role": "baseline"})
            marks = {k: trial.user_attrs[k] for k in ("lever", "enqueued") if k in trial.user_attrs}
            study.enqueue_trial(trial.params, user_attrs={"role": "candidate", "deferred_from": trial.number, **marks})
            trial.set_user_attr("outcome", TrialOutcome.DEFERRED.value)
            trial.set_user_attr("reasons", ["deferred: the baseline was not measured yet; this configuration runs "
                                            "again right after it"])
            log.info("trial %d deferred: the baseline runs first, then this configuration", trial.number)
            raise BaselineNotReady(f"trial {trial.number} deferred: the baseline must run first")
        if said != running[0].number:
            said = running[0].number
            worker = running[0].user_attrs.get("worker", "an unknown worker")
            log.info("trial %d waits for the baseline: trial %d is measuring it in worker %s%s", trial.number, said,
                     worker, f"; should that worker have stopped, its heartbeat goes stale within --grace {grace_s:g} s "
                     "and the baseline runs again here" if grace_s else "")
        time.sleep(2.0)  # another worker is measuring the baseline
