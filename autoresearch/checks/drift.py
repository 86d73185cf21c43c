"""The baseline's speed over the study: re-measured in fresh launches, every candidate read against the
reading nearest in time, and drift beyond the noise floor said out loud.

Why: a measurement taken while the machine is loaded (another job, a GPU that throttles as it heats,
another program on the GPU) is slower for a reason no knob caused. Trusting the baseline's one
reading from the start of the night, such a candidate looks dominated and is pruned, and the search
learns from a lie. So:

- Readings (autoresearch.checks.readings): every bench of the baseline's configuration is one, with its time and what the host and
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
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import optuna

from autoresearch.checks.readings import (
    KIND,
    UNSTEADY_FLOOR,
    Limits,
    Reading,
    conditions,
    conditions_text,
    read_readings,
    utc_now,
)
from autoresearch.ground.db import ResultsDB
from autoresearch.ground.errors import Unmeasured
from autoresearch.ground.plan import DriftPolicy, RunPlan
from autoresearch.ground.study import COUNTED, baseline_trial, is_baseline, passed_speeds
from autoresearch.measures.baseline import stored_speed_floor
from autoresearch.measures.objectives import dominated_by, objectives_from_bench
from autoresearch.measures.pool import save_pool
from bench import BenchError
from openai_client import ClientError
from search_space import SearchSpace, config_from_params
from serving.errors import LaunchError

__all__ = ["Check", "DriftPolicy", "DriftWatch", "check_measurement", "remeasure_due"]

log = logging.getLogger(__name__)


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
        measured = passed_speeds(other)
        if measured is None:
            continue
        if (other.user_attrs.get("drift") or {}).get("drifted"):
            continue
        at = _measured_at(other)
        near = nearest(readings, at) if at is not None else first
        if near is None or limits.drifted(near, first):
            continue
        theirs = (measured[0] / near.decode, measured[1] / near.prefill)
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
        why = remeasure_due(readings, policy=self.policy, limits=self.limits(study), now=utc_now(),
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
        if "bench" in payload:  # one more launch of the baseline: the search's reference and spread take it in
            save_pool(study, self.db, self.study_name)
        return Reading(source=f"drift check before trial {before_trial}", at=utc_now(), decode=payload.get("decode"),
                       prefill=payload.get("prefill"), conditions=payload.get("conditions"), error=payload.get("error"))

    def dominated_by(self, trial: optuna.Trial, values: tuple[float, float], *,
                     margin_rel: float) -> tuple[int | None, str | None]:
        """(the trial that dominates this measurement, or None; a note for the trial's reasons, or None).

        Records the drift check in the trial's user attr "drift"."""
        study = trial.study
        if not self.policy.enabled:
            return dominated_by(study, values, margin_rel=margin_rel), None
        readings = read_readings(study, self.db, self.study_name)
        now = utc_now()
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
