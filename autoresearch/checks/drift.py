"""The baseline's speed over the study: re-measured in fresh launches, every candidate read against the
reading nearest in time, and drift beyond the noise floor said out loud.

Why: a measurement taken while the machine is loaded (another job, a GPU that throttles as it heats,
another program on the GPU) is slower for a reason no knob caused. Trusting the baseline's one
reading from the start of the night, such a candidate looks dominated and is pruned, and the search
learns from a lie. So:

- Readings: every bench of the baseline's configuration is one, with its time and what the host and
  GPU were doing (`conditions`): the baseline trial's two launches, the drift checks, and the
  finalists' rounds. Each is compared with the first (the baseline trial's launch 0).
- Drift: a reading more than max(5%, 2x the baseline's launch-to-launch floor of that objective) away
  from the first (bench's rule for calling two configurations different). It is a warning in the log,
  in RESULTS.md and in the record of every trial measured under it.
- Re-measurement (`DriftWatch.before_launch`): before a candidate's launch, a fresh launch of the
  baseline when `every_trials` trials finished since the latest reading, or `every_minutes` passed,
  or the latest reading drifted and the one before it did not (a transient is told from a lasting
  change at once).
- Pruning (`DriftWatch.dominated_by`): a candidate is compared with the baseline reading nearest in
  time, as are the trials that could dominate it (speed-ups over their own nearest reading). One
  whose nearest reading drifted or is older than the policy allows is not pruned: it goes on to the
  gate, and its record says why; a trial measured under drift never prunes another.
- Unsteady: where the baseline's own two launches differ by more than UNSTEADY_FLOOR, the floor every
  limit is built on is itself noise (another job started between them): the log and the top of
  RESULTS.md say so, and no candidate is pruned on its speed in that study.

Turned off (`DriftPolicy(None, None)`, `--no-drift-check`), the study trusts the first reading and
prunes on raw values, as it did before; conditions are still recorded.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import optuna

from autoresearch.ground.db import ResultsDB
from autoresearch.ground.errors import Unmeasured
from autoresearch.ground.plan import DriftPolicy, RunPlan
from autoresearch.ground.study import COUNTED, baseline_trial, is_baseline, passed_so_far
from autoresearch.measures.baseline import stored_speed_floor
from autoresearch.measures.objectives import DECODE_RATE, PREFILL_RATE, dominated_by, objectives_from_bench
from bench import BenchError, BenchResult, NoiseFloor, mark_stalls
from bench.telemetry import decode_throttle_reasons
from openai_client import ClientError
from search_space import SearchSpace, config_from_params
from serving.errors import LaunchError

__all__ = ["MIN_DRIFT_REL", "Check", "DriftPolicy", "DriftReport", "DriftWatch", "Limits", "Reading", "conditions",
           "conditions_text", "read_drift", "read_readings", "remeasure_due", "round_drift"]

log = logging.getLogger(__name__)
MIN_DRIFT_REL = 0.05  # as bench's DRIFT_WARNING: a change worth a person's attention
NOISE_FACTOR = 2.0  # as bench's DifferenceRule: beyond twice the launch-to-launch floor
# The baseline's own two launches further apart than this: the machine was not steady while the floor was
# measured (another job, a GPU heating or shared), and every threshold built on that floor is as wide.
UNSTEADY_FLOOR = 0.25  # then no candidate is pruned on its speed: it goes on to the gate
KIND = "drift_bench"  # the results store's kind for a drift check's launch


# ---- what the machine was doing ----

def conditions(server_pid: int | None = None) -> dict[str, Any]:
    """The host's load and the GPU's clocks, throttle reasons and other compute processes, now.

    Readings this machine cannot give are absent, never guessed (no GPU: no "gpu" key).
    """
    out: dict[str, Any] = {"at": _now().isoformat(), "cpu_count": os.cpu_count()}
    try:
        out["load_avg"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    try:
        from gpu.device import visible_gpu

        with visible_gpu() as gpu:
            if gpu is not None:
                info, sample = gpu.info(), gpu.sample()
                ours = {os.getpid(), server_pid}
                out["gpu"] = {"name": info.name, "sm_clock_mhz": sample.sm_clock_mhz,
                              "max_sm_clock_mhz": info.max_sm_clock_mhz, "mem_clock_mhz": sample.mem_clock_mhz,
                              "temperature_c": sample.temperature_c, "power_w": sample.power_w,
                              "utilization_pct": sample.utilization_pct,
                              "throttle_reasons": list(decode_throttle_reasons(sample.throttle_mask)),
                              "other_pids": sorted(gpu.compute_pids() - ours)}
    except Exception as exc:  # noqa: BLE001 - a reading that failed is left out, and the measurement stands
        log.debug("GPU conditions not readable: %s", exc)
    return out


def conditions_text(c: dict[str, Any] | None) -> str:
    """One short cell for RESULTS.md, e.g. `load 1.9 (2 cores); 1410/1980 MHz, 71 C, sw_thermal_slowdown`."""
    if not c:
        return "-"
    parts = []
    if c.get("load_avg"):
        parts.append(f"load {c['load_avg'][0]:.1f} ({c.get('cpu_count')} cores)")
    g = c.get("gpu")
    if g:
        clock = f"{g['sm_clock_mhz']}/{g['max_sm_clock_mhz']} MHz" if g.get("max_sm_clock_mhz") else \
            f"{g['sm_clock_mhz']} MHz"
        parts.append(f"{clock}, {g['temperature_c']} C" + "".join(f", {r}" for r in g.get("throttle_reasons", ())))
        if g.get("other_pids"):
            parts.append(f"{len(g['other_pids'])} other GPU process(es)")
    return "; ".join(parts) or "-"


# ---- readings and limits ----

@dataclass(frozen=True)
class Reading:
    """One measurement of the baseline's configuration; decode/prefill None where it was unmeasured."""

    source: str  # e.g. "baseline trial 0, launch 1", "drift check before trial 7", "finalists round 1, launch 0"
    at: dt.datetime  # UTC
    decode: float | None
    prefill: float | None
    conditions: dict[str, Any] | None = None
    error: str | None = None

    @property
    def measured(self) -> bool:
        return self.decode is not None and self.prefill is not None


@dataclass(frozen=True)
class Limits:
    """How far from the first reading a reading may be before it counts as drift, per objective."""

    decode: float
    prefill: float
    floor_decode: float = 0.0  # the baseline's launch-to-launch spread they are built on
    floor_prefill: float = 0.0

    @classmethod
    def from_floor(cls, floor: NoiseFloor | None) -> Limits:
        def worst(rate: str) -> float:
            return max((v for k, v in (floor.rel_diff if floor else ()) if k.startswith(rate + "@")), default=0.0)

        d, p = worst(DECODE_RATE), worst(PREFILL_RATE)
        return cls(decode=max(MIN_DRIFT_REL, NOISE_FACTOR * d), prefill=max(MIN_DRIFT_REL, NOISE_FACTOR * p),
                   floor_decode=d, floor_prefill=p)

    @property
    def unsteady(self) -> str | None:
        """Said out loud where the floor itself is too wide to rank by: None on a steady machine."""
        wide = [f"{v:.0%} in {name}" for name, v in (("decode", self.floor_decode), ("prefill", self.floor_prefill))
                if v > UNSTEADY_FLOOR]
        if not wide:
            return None
        return (f"the baseline's own two launches differed by {' and '.join(wide)} (more than "
                f"{UNSTEADY_FLOOR:.0%}): the machine was not steady while they ran, so a speed difference smaller than "
                "that cannot be told from noise here, and the drift check's threshold (twice it) is as wide; re-run "
                "on a quiet machine (no other jobs; on a GPU, nothing else on it and its clocks steady)")

    def ratios(self, reading: Reading, first: Reading) -> tuple[float, float]:
        return reading.decode / first.decode, reading.prefill / first.prefill

    def drifted(self, reading: Reading, first: Reading) -> bool:
        d, p = self.ratios(reading, first)
        return abs(d - 1) > self.decode or abs(p - 1) > self.prefill


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _objectives(payload: dict) -> tuple[float, float] | None:
    try:
        return objectives_from_bench(mark_stalls(BenchResult.from_dict(payload)))
    except (Unmeasured, KeyError, TypeError, ValueError):
        return None


def read_readings(study: optuna.Study, db: ResultsDB, study_name: str) -> list[Reading]:
    """Every reading of the baseline's configuration, oldest first (empty before the baseline completed)."""
    base = baseline_trial(study)
    if base is None:
        return []
    conds = {r["launch"]: r["payload"] for r in db.measurements(study=study_name, kind="conditions", trial=base.number)}
    readings = []
    for row in db.measurements(study=study_name, kind="bench", trial=base.number):
        values = _objectives(row["payload"])
        readings.append(Reading(source=f"baseline trial {base.number}, launch {row['launch']}", at=row["created_at"],
                                decode=values[0] if values else None, prefill=values[1] if values else None,
                                conditions=conds.get(row["launch"]),
                                error=None if values else "unmeasured"))
    for row in db.measurements(study=study_name, kind=KIND):
        p = row["payload"]
        readings.append(Reading(source=f"drift check before trial {p['before_trial']}", at=row["created_at"],
                                decode=p.get("decode"), prefill=p.get("prefill"), conditions=p.get("conditions"),
                                error=p.get("error")))
    for row in db.measurements(study=study_name, kind="finalist_bench"):
        p = row["payload"]
        if p.get("trial") != base.number:
            continue
        values = _objectives(p)
        readings.append(Reading(source=f"finalists round {p['round']}, launch {p['launch']}", at=row["created_at"],
                                decode=values[0] if values else None, prefill=values[1] if values else None,
                                conditions=p.get("conditions"), error=None if values else "unmeasured"))
    return sorted(readings, key=lambda r: r.at)


def _finished_since(study: optuna.Study, since: dt.datetime) -> int:
    """Candidate trials finished after `since` (Optuna keeps naive local times; compared as instants)."""
    return sum(1 for t in study.get_trials(deepcopy=False, states=COUNTED)
               if not is_baseline(t) and t.datetime_complete is not None
               and t.datetime_complete.astimezone(dt.UTC) > since)


def remeasure_due(readings: Sequence[Reading], *, policy: DriftPolicy, limits: Limits, now: dt.datetime,
                  finished_since_latest: int) -> str | None:
    """Why the baseline must be measured again before the next candidate, or None."""
    measured = [r for r in readings if r.measured]
    if not policy.enabled or not measured:
        return None
    latest, first = measured[-1], measured[0]
    if policy.every_trials is not None and finished_since_latest >= policy.every_trials:
        return f"{finished_since_latest} trials since the latest reading"
    age_min = (now - latest.at).total_seconds() / 60
    if policy.every_minutes is not None and age_min >= policy.every_minutes:
        return f"the latest reading is {age_min:.0f} minutes old"
    if latest is not readings[-1] and readings[-1].error:
        return f"the latest drift check failed ({readings[-1].error})"
    if limits.drifted(latest, first) and (len(measured) < 2 or not limits.drifted(measured[-2], first)):
        return "the latest reading drifted: measuring again to tell a transient from a lasting change"
    return None


@dataclass(frozen=True)
class Check:
    """A candidate's measurement as the drift check sees it, stored as the trial's "drift" user attr."""

    reading: str  # the nearest reading's source
    reading_at: str
    measured_at: str
    decode_vs_first: float
    prefill_vs_first: float
    drifted: bool  # the nearest reading drifted beyond the limits
    stale: bool  # the nearest reading is older than the policy allows
    warning: str | None
    unsteady: bool = False  # the baseline's own launches disagree beyond a steady machine's (Limits.unsteady)

    @property
    def hold(self) -> bool:
        """Not to be pruned on: the loop cannot separate this measurement from drift."""
        return self.drifted or self.stale or self.unsteady


def nearest(readings: Sequence[Reading], at: dt.datetime) -> Reading | None:
    measured = [r for r in readings if r.measured]
    return min(measured, key=lambda r: abs((r.at - at).total_seconds())) if measured else None


def check_measurement(readings: Sequence[Reading], *, at: dt.datetime, policy: DriftPolicy, limits: Limits,
                      finished_since_nearest: int) -> Check | None:
    """The drift check's word on a measurement taken at `at`; None without a baseline reading."""
    near = nearest(readings, at)
    if near is None:
        return None
    first = next(r for r in readings if r.measured)
    d, p = limits.ratios(near, first)
    drifted = limits.drifted(near, first)
    age_min = (at - near.at).total_seconds() / 60
    stale = policy.enabled and ((policy.every_trials is not None and finished_since_nearest > policy.every_trials)
                                or (policy.every_minutes is not None and age_min > 2 * policy.every_minutes))
    warning = None
    if drifted:
        warning = (f"measured under drift: the baseline's nearest reading ({near.source}) was at {d:.2f}x decode, "
                   f"{p:.2f}x prefill of its first (limits ±{limits.decode:.0%}, ±{limits.prefill:.0%})")
    elif stale:
        warning = f"the baseline's nearest reading ({near.source}, {age_min:.0f} min earlier) is older than the policy allows"
    elif limits.unsteady:
        warning = (f"measurements unsteady: the baseline's own two launches differ by more than {UNSTEADY_FLOOR:.0%}, "
                   "so a slower reading cannot be told from noise")
    return Check(reading=near.source, reading_at=near.at.isoformat(), measured_at=at.isoformat(),
                 decode_vs_first=d, prefill_vs_first=p, drifted=drifted, stale=stale, warning=warning,
                 unsteady=limits.unsteady is not None)


def _measured_at(t: optuna.trial.FrozenTrial) -> dt.datetime | None:
    at = (t.user_attrs.get("drift") or {}).get("measured_at")
    if at:
        return dt.datetime.fromisoformat(at)
    return t.datetime_complete.astimezone(dt.UTC) if t.datetime_complete else None


def relative_dominator(study: optuna.Study, values: tuple[float, float], reference: Reading,
                       readings: Sequence[Reading], limits: Limits, *, margin_rel: float) -> int | None:
    """A feasible trial faster than `values` on both objectives by more than the margin, each side's speed
    read as a ratio to its own nearest baseline reading. Trials measured under drift prune nobody."""
    first = next(r for r in readings if r.measured)
    mine = (values[0] / reference.decode, values[1] / reference.prefill)
    for other in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        if not passed_so_far(other) or other.values is None or not all(math.isfinite(v) for v in other.values):
            continue
        if (other.user_attrs.get("drift") or {}).get("drifted"):
            continue
        at = _measured_at(other)
        near = nearest(readings, at) if at is not None else first
        if near is None or limits.drifted(near, first):
            continue
        theirs = (other.values[0] / near.decode, other.values[1] / near.prefill)
        if all(o > v * (1.0 + margin_rel) for o, v in zip(theirs, mine, strict=True)):
            return other.number
    return None


# ---- the loop's hooks ----

class DriftWatch:
    """The trial runner's drift check: `before_launch` re-measures when due, `dominated_by` decides pruning."""

    def __init__(self, plan: RunPlan, db: ResultsDB, space: SearchSpace):
        self.plan = plan
        self.policy = plan.drift
        self.db = db
        self.space = space
        self._warned = False  # the unsteady floor is logged once per process

    @property
    def study_name(self) -> str:
        return self.plan.study_name

    def limits(self, study: optuna.Study) -> Limits:
        limits = Limits.from_floor(stored_speed_floor(study))
        if limits.unsteady and not self._warned:
            log.warning("measurements unsteady: %s", limits.unsteady)
            self._warned = True
        return limits

    def before_launch(self, trial: optuna.Trial) -> Reading | None:
        """Re-measure the baseline in a fresh launch when it is due; returns the new reading, if any."""
        if not self.policy.enabled:
            return None
        study = trial.study
        readings = read_readings(study, self.db, self.study_name)
        measured = [r for r in readings if r.measured]
        if not measured:
            return None
        why = remeasure_due(readings, policy=self.policy, limits=self.limits(study), now=_now(),
                            finished_since_latest=_finished_since(study, measured[-1].at))
        if why is None:
            return None
        log.info("drift check before trial %d: %s; launching the baseline", trial.number, why)
        reading = self._remeasure(study, trial.number, why)
        first = measured[0]
        if reading.measured and self.limits(study).drifted(reading, first):
            d, p = self.limits(study).ratios(reading, first)
            log.warning("baseline drift: %s reads %.2fx decode, %.2fx prefill of its first reading (%s); "
                        "candidates measured now are not pruned on it", reading.source, d, p,
                        conditions_text(reading.conditions))
        return reading

    def _remeasure(self, study: optuna.Study, before_trial: int, why: str) -> Reading:
        base = baseline_trial(study)
        payload: dict[str, Any] = {"before_trial": before_trial, "why": why}
        started = time.monotonic()
        try:
            config = config_from_params(self.space, base.params)
            with self.plan.server_spec.launch(config, f"drift-before-{before_trial:04d}-{config.digest[:12]}") as server:
                result = self.plan.fresh_bench(server)
                payload["conditions"] = conditions(getattr(server, "pid", None))
            payload["bench"] = result.to_dict()
            payload["decode"], payload["prefill"] = objectives_from_bench(result)
        except (LaunchError, BenchError, ClientError, Unmeasured) as exc:
            payload["error"] = f"{type(exc).__name__}: {exc}"
            log.warning("drift check before trial %d: the baseline could not be re-measured (%s); candidates "
                        "are not pruned until it is", before_trial, payload["error"])
        payload["elapsed_s"] = time.monotonic() - started  # launch, bench and stop: what the check cost
        self.db.add_measurement(study=self.study_name, trial=None, kind=KIND,
                                config_digest=base.user_attrs["config_digest"], payload=payload)
        return Reading(source=f"drift check before trial {before_trial}", at=_now(), decode=payload.get("decode"),
                       prefill=payload.get("prefill"), conditions=payload.get("conditions"), error=payload.get("error"))

    def dominated_by(self, trial: optuna.Trial, values: tuple[float, float], *,
                     margin_rel: float) -> tuple[int | None, str | None]:
        """(the trial that dominates this measurement, or None; a note for the trial's reasons, or None).

        Records the drift check in the trial's user attr "drift"."""
        study = trial.study
        if not self.policy.enabled:
            return dominated_by(study, values, margin_rel=margin_rel), None
        readings = read_readings(study, self.db, self.study_name)
        now = _now()
        near = nearest(readings, now)
        if near is None:  # no baseline reading: nothing to read drift against
            return dominated_by(study, values, margin_rel=margin_rel), None
        limits = self.limits(study)
        check = check_measurement(readings, at=now, policy=self.policy, limits=limits,
                                  finished_since_nearest=_finished_since(study, near.at))
        trial.set_user_attr("drift", dataclasses.asdict(check) | {"hold": check.hold})
        if check.hold:
            better = relative_dominator(study, values, near, readings, limits, margin_rel=margin_rel)
            if better is None:
                return None, check.warning
            log.warning("trial %d: not pruned although it reads slower than trial %d: %s", trial.number, better,
                        check.warning)
            trial.set_user_attr("drift", dataclasses.asdict(check) | {"hold": True, "held_from_pruning_by": better})
            return None, f"not pruned ({check.warning}; it reads slower than trial {better} on both objectives)"
        return relative_dominator(study, values, near, readings, limits, margin_rel=margin_rel), None


def round_drift(readings: Sequence[Reading], limits: Limits, round_: int) -> list[str]:
    """Warnings for a finalists round's baseline launches that drifted from the first reading."""
    first = next((r for r in readings if r.measured), None)
    if first is None:
        return []
    out = []
    for r in readings:
        if r.measured and r.source.startswith(f"finalists round {round_},") and limits.drifted(r, first):
            d, p = limits.ratios(r, first)
            out.append(f"{r.source}: the baseline read {d:.2f}x decode, {p:.2f}x prefill of its first reading "
                       f"({conditions_text(r.conditions)})")
    return out


# ---- what RESULTS.md shows ----

@dataclass(frozen=True)
class DriftRow:
    source: str
    at: str  # UTC, to the second
    decode: float | None
    prefill: float | None
    decode_ratio: float | None  # against the first reading
    prefill_ratio: float | None
    drifted: bool
    conditions: str
    error: str | None


@dataclass(frozen=True)
class DriftReport:
    policy: str
    limits: Limits
    rows: list[DriftRow]
    checks: int  # drift-check launches: what the check cost
    check_seconds: float  # their launch, bench and stop, summed
    held: list[tuple[int, str]]  # trials measured under drift or on a stale reading: (trial, why)

    @property
    def drifted(self) -> list[DriftRow]:
        return [r for r in self.rows if r.drifted]


def read_drift(plan: RunPlan, study: optuna.Study, db: ResultsDB) -> DriftReport | None:
    """The baseline's readings over the study, each against the first; None before the baseline completed."""
    readings = read_readings(study, db, plan.study_name)
    first = next((r for r in readings if r.measured), None)
    if first is None:
        return None
    limits = Limits.from_floor(stored_speed_floor(study))
    rows = []
    for r in readings:
        ratios = limits.ratios(r, first) if r.measured else (None, None)
        rows.append(DriftRow(source=r.source, at=r.at.strftime("%Y-%m-%d %H:%M:%S"), decode=r.decode,
                             prefill=r.prefill, decode_ratio=ratios[0], prefill_ratio=ratios[1],
                             drifted=r.measured and limits.drifted(r, first), conditions=conditions_text(r.conditions),
                             error=r.error))
    checks = db.measurements(study=plan.study_name, kind=KIND)
    held = [(t.number, t.user_attrs["drift"]["warning"]) for t in study.get_trials(deepcopy=False)
            if (t.user_attrs.get("drift") or {}).get("hold")]
    return DriftReport(policy=plan.drift.describe(), limits=limits, rows=rows, held=held,
                       checks=len(checks), check_seconds=sum(r["payload"].get("elapsed_s", 0.0) for r in checks))
