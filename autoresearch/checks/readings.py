"""The baseline's readings over a study: every bench of its configuration, with its time and what the host and
GPU were doing, each read against the first within limits built on the baseline's own launch-to-launch floor;
and what RESULTS.md shows of them. What the loop does with them (re-measure, hold a candidate from pruning)
is autoresearch.checks.drift's.

Usage:
    readings = read_readings(study, db, study_name); limits = Limits.from_floor(floor)
    limits.drifted(readings[-1], readings[0]); read_drift(plan, study, db)
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import optuna

from autoresearch.ground.db import ResultsDB
from autoresearch.ground.errors import Unmeasured
from autoresearch.ground.plan import RunPlan
from autoresearch.ground.study import baseline_trial
from autoresearch.measures.baseline import stored_speed_floor
from autoresearch.measures.objectives import DECODE_RATE, PREFILL_RATE, objectives_from_bench
from bench import BenchResult, NoiseFloor, mark_stalls
from bench.telemetry import decode_throttle_reasons

__all__ = ["KIND", "MIN_DRIFT_REL", "DriftReport", "DriftRow", "Limits", "Reading", "conditions", "conditions_text", "utc_now",
           "read_drift", "read_readings", "round_drift"]

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
    out: dict[str, Any] = {"at": utc_now().isoformat(), "cpu_count": os.cpu_count()}
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


def utc_now() -> dt.datetime:
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
