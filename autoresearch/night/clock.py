"""The night's one clock: the run's deadline, the stages that must follow the search, and the night as run.

Why: `--hours H` is the night a user gives the whole run, not only its search. The stages after the
search (the finalists' launches, their task-tier judgments with the baseline's lazy answers, the
minimization and the minimal champion's gate, the report) take hours on a thinking 27B, and a search
that runs to the deadline overruns by all of them. So the loop starts a trial only while that trial
and every stage after the search still fit in what is left (`NightClock.may_start`), the minimization at
the least it needs (its ranking round and one attempt: it is the first to give, and takes what is left), at the night
plan's rates (autoresearch.night.forecast: the stated or assumed ones until this run has measured its own),
re-estimated after every trial. The progress display's ETAs are the same numbers under the same stage
names (autoresearch.ground.stages).

If a stage overruns anyway, the optional stages shrink, in this order, and RESULTS.md says what was cut
and why (`NightClock.cuts`):
1. the minimization's launch bound, to what fits before the deadline (cut whole where not even its
   ranking round and one attempt fit);
2. the number of finalists judged on the task tier: the fastest qualified finalist is always judged,
   each further one only if its judgment fits.
Never the gate's claim: a judgment that runs answers as far as its walk needs, and a minimal champion
that differs from the confirmed one is gated before export may write it.

The night as run: each stage's planned seconds (in the plan made before the first trial, and in the
plan at the stage's start) against its measured seconds, kept in the study (`NIGHT_KEY`), so that a
resumed night adds up its calls' wall times and RESULTS.md shows the whole run.

Usage:
    clock = NightClock(hours=8, stored=study.user_attrs.get(NIGHT_KEY))
    clock.set_plan(forecast.after_search(), reserve=forecast.reserve(), trial_s=forecast.trial_s,
                   search_s=forecast.search_s)
    why = clock.may_start(trial_s)        # None: the next trial fits
    with clock.timed(FINALISTS): ...
    clock.save(study)
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator

import optuna

from autoresearch.ground.stages import AFTER_SEARCH, SEARCH
from autoresearch.night.progress import format_duration as _dur

__all__ = ["NIGHT_KEY", "NightClock", "least_minimization", "tabbyapi_subset_launches", "versus_baseline_launches"]

NIGHT_KEY = "night"


def least_minimization(per_config: int, changes: int) -> int:
    """The fewest launches that minimize anything, for a champion of `changes` changes: its ranking round
    (per_config x (changes + 1)), one attempt (2 x per_config) and the minimal champion against the baseline
    (2 x per_config, kept from the start: autoresearch.champion.minimize). What the search keeps for the
    minimization (autoresearch.night_plan.minimize_launches) and the least the clock lets it start with
    (minimize_bound)."""
    return per_config * (changes + 1) + 2 * per_config + versus_baseline_launches(per_config)


def versus_baseline_launches(per_config: int) -> int:
    """The minimization's last round: the minimal champion against the baseline, `per_config` launches each
    (autoresearch.champion.minimize, which keeps them from the start of its bound)."""
    return 2 * per_config


def tabbyapi_subset_launches(per_config: int) -> int:
    """The minimization's launches of the TabbyAPI subsets (the exllamav3 engine's: what TabbyAPI can run)."""
    return 3 * per_config


class NightClock:
    """The deadline and the plan's seconds per stage; decides what may start and keeps the night as run."""

    def __init__(self, hours: float | None, *, stored: dict | None = None,
                 clock: Callable[[], float] | None = None):
        self.hours = hours
        self._clock = clock or time.monotonic  # looked up now, not at import: a test may script it
        self.started = self._clock()
        # a night resumed with the same --hours goes on where it stopped; one that ended, or another --hours, is new
        same = stored is not None and not stored.get("ended") and stored.get("hours") == hours
        old = stored if same else {}
        self.spent_before = float(old.get("spent_s", 0.0))
        self.rows: dict[str, dict] = {k: dict(v) for k, v in (old.get("rows") or {}).items()}
        self.cuts: list[str] = list(old.get("cuts") or [])
        self.first: dict[str, float] | None = old.get("first_plan")
        self.search_stopped: str | None = old.get("search_stopped")  # why the search stopped before --trials
        self.after: dict[str, float] = {}  # the latest plan: seconds of each stage after the search
        self.reserve: dict[str, float] = {}  # the same, as kept before a trial starts (the minimization's least)
        self.trial_s: float | None = None
        self.ended = False

    # ---- the plan ----

    def set_plan(self, after: dict[str, float], *, trial_s: float, search_s: float,
                 reserve: dict[str, float] | None = None) -> None:
        """The latest plan's seconds: each stage after the search as expected (`after`) and as kept before a trial
        starts (`reserve`: the minimization at its ranking round and one attempt; default `after`), one candidate
        trial, the whole search."""
        self.after = {name: after.get(name, 0.0) for name in AFTER_SEARCH}
        self.reserve = {name: (reserve or after).get(name, 0.0) for name in AFTER_SEARCH}
        self.trial_s = trial_s
        if self.first is None:  # the plan made before the first trial, kept for the night as run
            self.first = {SEARCH: search_s, **self.after}

    def after_search_s(self) -> float:
        """What the search keeps for the stages after it."""
        return sum(self.reserve.values())

    # ---- the deadline ----

    def elapsed_s(self) -> float:
        return self.spent_before + self._clock() - self.started

    def left_s(self) -> float | None:
        return None if self.hours is None else self.hours * 3600.0 - self.elapsed_s()

    def may_start(self, trial_s: float) -> str | None:
        """None where one more trial of `trial_s` and every stage after the search fit in what is left; else why not."""
        left = self.left_s()
        if left is None:
            return None
        need = trial_s + self.after_search_s()
        if need <= left:
            return None
        stages = ", ".join(f"{name} {_dur(s)}" for name, s in self.reserve.items() if s)
        return (f"the search stops: one more trial ({_dur(trial_s)}) and the stages after it ({stages}) need "
                f"{_dur(need)}, and {_dur(max(left, 0.0))} of --hours {self.hours:g} is left")

    def minimize_bound(self, *, per_launch_s: float, launches: int, changes: int, extra_launches: int,
                       gate_s: float, report_s: float) -> tuple[int | None, str | None]:
        """The minimization's launch bound that fits before the deadline (first to shrink), or a cut.

        Returns (bound, None) where it fits, (None, None) where no deadline bounds it, (None, why) where not
        even its ranking round (launches x (changes + 1)) and one attempt (2 x launches) fit beside the
        gate, the report and its `extra_launches` (the TabbyAPI subsets')."""
        left = self.left_s()
        if left is None:
            return None, None
        fit = math.floor(max(left - gate_s - report_s, 0.0) / per_launch_s) - extra_launches
        need = least_minimization(launches, changes)
        if fit >= need:
            return fit, None
        why = (f"minimization cut: its ranking round and one attempt need {need + extra_launches} launches "
               f"({_dur((need + extra_launches) * per_launch_s)}), and {_dur(max(left, 0.0))} was left before the "
               f"deadline, the minimal gate ({_dur(gate_s)}) and the report included")
        self.cuts.append(why)
        return None, why

    def may_judge(self, judged_before: int, *, judgment_s: float, report_s: float) -> str | None:
        """None where a finalist's judgment may start (the first always: it is what the night is for); else why
        not (the second cut, after the minimization's)."""
        left = self.left_s()
        if judged_before == 0 or left is None or judgment_s + report_s <= left:
            return None
        why = (f"finalist not judged: a judgment takes about {_dur(judgment_s)} and {_dur(max(left, 0.0))} was left "
               "before the deadline (the minimization was cut first)")
        self.cuts.append(why)
        return why

    # ---- the night as run ----

    @contextlib.contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        """Time one stage (a stage that runs several times, e.g. TASKS, adds up) into the night as run."""
        planned = self.after.get(stage) if stage != SEARCH else None
        started = self._clock()
        try:
            yield
        finally:
            self.add(stage, self._clock() - started, planned_s=planned)

    def add(self, stage: str, seconds: float, *, planned_s: float | None = None) -> None:
        row = self.rows.setdefault(stage, {"measured_s": 0.0, "planned_s": planned_s, "runs": 0})
        row["measured_s"] += seconds
        row["runs"] += 1
        if row.get("planned_s") is None:
            row["planned_s"] = planned_s

    def measured_s(self, stage: str) -> float:
        return self.rows.get(stage, {}).get("measured_s", 0.0)

    def table(self) -> list[dict]:
        """The night as run, in the run's order: stage, first plan, plan at its start, measured, runs."""
        first = self.first or {}
        order = [SEARCH, *AFTER_SEARCH]
        return [{"stage": name, "first_s": first.get(name), "planned_s": self.rows[name]["planned_s"],
                 "measured_s": self.rows[name]["measured_s"], "runs": self.rows[name]["runs"]}
                for name in order if name in self.rows]

    def to_dict(self) -> dict:
        return {"hours": self.hours, "spent_s": round(self.elapsed_s(), 3), "rows": self.rows, "cuts": self.cuts,
                "search_stopped": self.search_stopped,
                "first_plan": self.first, "ended": self.ended, "table": self.table(),
                "total_first_s": sum((self.first or {}).values()) or None}

    def save(self, study: optuna.Study) -> None:
        study.set_user_attr(NIGHT_KEY, self.to_dict())
