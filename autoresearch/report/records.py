"""What RESULTS.md shows of one study, as typed records: read by autoresearch.report.snapshot, rendered by
autoresearch/report/RESULTS.md.jinja (autoresearch.report.results_md)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass
from typing import Any

from autoresearch.champion.change_costs import ChangeCosts
from autoresearch.checks.readings import DriftReport
from autoresearch.ground.plan import RunPlan
from autoresearch.ground.ranked_by import ENERGY_RANKED, GEOMEAN, RANKED_BY
from autoresearch.measures.energy import EnergyReport
from autoresearch.measures.request_time import RequestMix
from autoresearch.report.per_kind import DecodeByKind
from autoresearch.report.ratios import Ratios

__all__ = ["Baseline", "Champion", "Confirmer", "FinalistLaunches", "Finalists", "FinalistRow", "FirstTrial",
           "FrontRow", "Measured", "MeasuredRow", "Point", "Provenance", "StudySnapshot", "TaskDecisionRow", "TaskTier", "TasksetRow",
           "changed_knobs", "with_plot"]


def changed_knobs(config: dict, baseline: dict) -> str:
    """The config's differences from the baseline, e.g. `max_chunk_size=4096, EXL3_INT8_GEMV=0`."""
    diffs = [f"{k}={v}" for k, v in sorted(config.get("args", {}).items()) if baseline.get("args", {}).get(k) != v]
    diffs += [f"{k}={v}" for k, v in sorted(config.get("env", {}).items()) if baseline.get("env", {}).get(k) != v]
    diffs += [f"{k}=(exllamav3 default)" for k in sorted(baseline.get("env", {})) if k not in config.get("env", {})]
    return ", ".join(diffs) or "(baseline)"


@dataclass(frozen=True)
class Champion:
    trial: int | None  # None: the baseline is the champion
    decode: float | None
    prefill: float | None
    speedup: float  # the stored number it was chosen by (ranked_by)
    reason: str
    changes: str
    ranked_by: str = GEOMEAN
    # side by side: request time (stored, or recomputed from an older study's records), decode and prefill
    request_speedup: float | None = None
    decode_speedup: float | None = None
    prefill_speedup: float | None = None
    parts_note: str | None = None  # why request time lies outside its parts' ratios, where it does

    @property
    def by_request_time(self) -> bool:
        return self.ranked_by == RANKED_BY

    @property
    def by_energy(self) -> bool:
        """Ranked by energy per request (--rank-by energy): `speedup` is E(baseline) / E(champion)."""
        return self.ranked_by == ENERGY_RANKED

    @property
    def who(self) -> str:
        return "the baseline" if self.trial is None else f"trial {self.trial}"


@dataclass(frozen=True)
class FrontRow:
    trial: int
    decode: float
    prefill: float
    decode_ratio: float | None  # None: no baseline to compare with
    prefill_ratio: float | None
    changes: str
    request_ratio: float | None = None  # T(baseline) / T(trial) on the workload's requests
    tasks_pending: bool = False  # through fidelity, its task tier not run: not passed (study.tasks_pending)


@dataclass(frozen=True)
class FirstTrial:
    """A trial the loop enqueued after the baseline: the user's --enqueue, then the catalog's levers."""
    trial: int
    source: str  # "--enqueue" or "lever"
    outcome: str
    changes: str
    request_ratio: float | None
    decode_ratio: float | None
    prefill_ratio: float | None


@dataclass(frozen=True)
class Point:
    """A completed trial with measured values, as the Pareto plot draws it."""
    trial: int
    decode: float
    prefill: float
    feasible: bool
    on_front: bool
    tasks_pending: bool = False  # neither passed nor rejected: its task tier has not run


@dataclass(frozen=True)
class FinalistRow:
    round: int
    trial: int
    decode: float | None
    prefill: float | None
    speedup: float | None  # the stored verdict's number (by the study's ranked_by)
    decision: str
    request_speedup: float | None = None  # request time: stored, or from the launches' records by the decision's estimator
    decode_speedup: float | None = None
    prefill_speedup: float | None = None
    launch_s: tuple[float, ...] = ()  # each counted launch's request time (s), what the ratios are made of
    parts_note: str | None = None  # why request time lies outside its parts' ratios, where it does


@dataclass(frozen=True)
class FinalistLaunches:
    """A configuration's counted launches in one finalists' round, read from their records
    (autoresearch.measures.launch_costs): each one's request time, and the request time's, decode's and
    prefill's T(baseline) / T(it) from them by the one estimator (autoresearch.report.ratios; None for the
    baseline, or without the baseline's launches)."""
    seconds: tuple[float, ...]
    ratios: Ratios | None


@dataclass(frozen=True)
class Confirmer:
    """The one worker (and GPU) that confirmed the last round."""
    round: int
    worker: str
    gpu: dict
    cuda_visible_devices: str | None


@dataclass(frozen=True)
class Finalists:
    rows: list[FinalistRow]
    confirmer: Confirmer | None

    @property
    def parts_notes(self) -> list[str]:
        return [r.parts_note for r in self.rows if r.parts_note]


@dataclass(frozen=True)
class Baseline:
    trial: int
    decode: float | None
    prefill: float | None
    config_digest: str
    speed_floor: list[tuple[str, float]]  # (bench key, relative spread), decode and prefill keys only
    fidelity_floor: dict | None  # the baseline's fidelity metrics (kl_mean, kl_p99, top1_agreement, ...)
    config_json: str


@dataclass(frozen=True)
class MeasuredRow:
    trial: int
    outcome: str
    speeds: dict[str, float | None]  # by bench headline key
    fidelity: dict | None  # kl_mean, top1_agreement, top1_decisive_agreement (None before it existed)
    gpu: str
    changes: str


@dataclass(frozen=True)
class Measured:
    """Every trial's first-launch bench medians and fidelity, whatever the gate made of it."""
    columns: list[tuple[str, str]]  # (bench headline key, column title), in table order
    rows: list[MeasuredRow]
    gpu_count: int


@dataclass(frozen=True)
class TasksetRow:
    name: str
    run: str  # "baseline" or "champion (trial N)"
    result: Any  # eval.records.TasksetResult


@dataclass(frozen=True)
class TaskDecisionRow:
    trial: str
    verdict: dict  # eval's stored taskset verdict: name, decision, tasks_used, paired_tasks, lost, gained, power...


@dataclass(frozen=True)
class TaskTier:
    policy: Any  # eval.decision.TaskPolicy
    decisions: list[TaskDecisionRow]
    guard: tuple = ()  # guard mode: eval.guard.GuardStatement per taskset of the baseline's run


@dataclass(frozen=True)
class Provenance:
    manifest_hash: str
    manifest_path: str
    engine: str
    engine_version: str | None
    torch_version: str | None
    cuda_version: str
    gpu_name: str | None
    gpu_driver: str | None
    power_limit_w: Any
    platform: str
    commit: str | None
    dirty: bool


@dataclass(frozen=True)
class Verdict:
    """How "faster" was decided in the last finalists' round, and how often it errs at this study's noise."""
    rule: str  # the rule in words (autoresearch.measures.faster.VerdictRule.text)
    launches: int  # the baseline's launches its spread was pooled from
    sets: int  # launch sets the round made
    stopped: str  # why the round ended
    error_rates: str | None  # the simulated error rates in words; None: not known (and why_none says why)
    why_none: str | None = None


@dataclass(frozen=True)
class StudySnapshot:
    plan: RunPlan
    generated: dt.datetime
    stopped: str | None  # why the study stopped before any baseline completed
    fidelity_gate: dict  # the fidelity policy as the stored decisions applied it
    champion: Champion | None
    front: list[FrontRow]
    finalists: Finalists
    baseline: Baseline | None
    rejected: list[tuple[int, str, str, str]]  # trial, outcome, reasons, changes
    measured: Measured
    tasksets: list[TasksetRow] | None  # None: no suite ran
    task_tier: TaskTier | None  # None: no suite ran
    provenance: Provenance | None
    points: list[Point]
    decode_by_kind: DecodeByKind | None = None  # the baseline and the champion on each decode point
    ranking: str = ""  # what ranked the study, in words
    first_trials: list[FirstTrial] = dataclasses.field(default_factory=list)
    mix: RequestMix | None = None  # the workload's requests request time is computed on
    change_costs: ChangeCosts | None = None  # what each change of the champion bought (its minimization)
    minimization_launches: int = 0  # launches stored by a minimization that has not finished (no table yet)
    plot: str | None = None  # the Pareto plot's file name, once drawn
    drift: DriftReport | None = None  # the baseline's readings over the study (autoresearch.checks.drift)
    night_plan: dict | None = None  # the latest night plan (autoresearch.night_plan), as the loop printed it
    energy: EnergyReport | None = None  # joules per request beside request time (autoresearch.measures.energy)
    night: dict | None = None  # the night as run (autoresearch.night.clock): each stage planned against measured, cuts
    suite_concurrency: dict | None = None  # the task tier's answers in flight and why (autoresearch.trial.suite_concurrency)
    pool: dict | None = None  # every baseline launch pooled: the search's reference and the spread (autoresearch.measures.pool)
    verdict: Verdict | None = None  # the speed verdict's rule and its error rates at the last round (None: no round)



def with_plot(snapshot: StudySnapshot, name: str | None) -> StudySnapshot:
    return dataclasses.replace(snapshot, plot=name)
