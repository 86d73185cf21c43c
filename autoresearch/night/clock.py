"""The night's one clock: the run's deadline, the stages that must follow the search, and the night as run.

Why: `--hours H` is the night a user gives the whole run, not only its search. The stages after the search
take hours on a thinking 27B, and a search that runs to the deadline overruns by all of them; but a search that
keeps time for every stage that might follow finds nothing on a short night (the real 0.5B's 15-minute night
kept 7 minutes for minimizing a champion that did not exist yet, and searched no candidate). So the search keeps
only what a champion needs (`reserve`, from autoresearch.night.forecast): the finalists' launches at their least,
one task-tier judgment with the baseline's lazy answers it needs, and the report. The minimization and the gates
that must follow it (the minimal champion's and the TabbyAPI subset's) are kept too only on a night long enough
(the policy, forecast_record.MINIMIZE_SHARE: where their least fits in a quarter of --hours); otherwise they take what
the search leaves, and a night that leaves too little exports the confirmed champion, not minimized, and says so.

`stage_budget_s(stage)` is the one rule: the seconds a stage may spend now while keeping the reserve of the stages
that must follow it. The search starts a trial only within it (`may_start`); the finalists' stage may add launches
within it; the minimization's launch bound is what fits in it, its gates' whole time kept (`minimize_bound`).
If a stage overruns anyway, the optional ones give way, and RESULTS.md says what was cut and why (`cuts`):
1. the minimization, bounded to what fits before the deadline (cut whole where not even its ranking round and
   one attempt fit beside its gates);
2. the finalists judged after the first: the fastest qualified finalist is always judged, each further one only
   if its judgment fits (`may_judge`).
Never the gate's claim: a judgment runs its answers as far as its walk needs, and a minimal champion that differs
from the confirmed one is gated before export may write it.

The night as run: each stage's planned seconds (in the first plan, scheduled into the night, and in the plan at
the stage's start) against its measured seconds, kept in the study (`NIGHT_KEY`). The spent time is saved at
every stage's start and end and, while a stage runs, every AUTOSAVE_S by a ticker thread (`autosave`), so a kill
-9 anywhere loses at most that much from the count, and a resumed night with the same --hours goes on from it.
A night that ended is over (`over`): the same command again keeps its record and runs nothing.

Usage:
    clock = NightClock(hours=8, stored=study.user_attrs.get(NIGHT_KEY))
    clock.set_plan(forecast.after_search(), reserve=forecast.reserve(), trial_s=forecast.trial_s,
                   first=forecast.schedule())
    with clock.autosave(study):
        why = clock.may_start(trial_s)        # None: the next trial fits
        with clock.timed(FINALISTS): ...
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator

import optuna

from autoresearch.ground.stages import AFTER_SEARCH, MINIMAL_GATE, MINIMIZE, SEARCH, TABBYAPI_GATE
from autoresearch.night.progress import format_duration as _dur

__all__ = ["AUTOSAVE_S", "NIGHT_KEY", "NightClock", "Ticker", "least_minimization", "tabbyapi_subset_launches",
           "versus_baseline_launches"]

log = logging.getLogger(__name__)
NIGHT_KEY = "night"
AUTOSAVE_S = 30.0  # the most a kill -9 loses from the night's count
_ORDER = (SEARCH, *AFTER_SEARCH)
_GATES = (MINIMAL_GATE, TABBYAPI_GATE)  # must follow a minimization that ran, kept or not


def least_minimization(per_config: int, changes: int) -> int:
    """The fewest launches that minimize anything, for a champion of `changes` changes: its ranking round
    (per_config x (changes + 1)), one attempt (2 x per_config) and the minimal champion against the baseline
    (2 x per_config, kept from the start: autoresearch.champion.minimize). What the plan counts as the minimization's
    least (autoresearch.night_plan.minimize_launches) and the least the clock lets it start with (minimize_bound)."""
    return per_config * (changes + 1) + 2 * per_config + versus_baseline_launches(per_config)


def versus_baseline_launches(per_config: int) -> int:
    """The minimization's last round: the minimal champion against the baseline, `per_config` launches each
    (autoresearch.champion.minimize, which keeps them from the start of its bound)."""
    return 2 * per_config


def tabbyapi_subset_launches(per_config: int) -> int:
    """The minimization's launches of the TabbyAPI subsets (the exllamav3 engine's: what TabbyAPI can run)."""
    return 3 * per_config


class Ticker:
    """Calls `fn` every `every_s` seconds on a daemon thread until stopped: the night's autosave while a long
    stage (a judgment's answers) gives the loop no event to save on. A failed call is logged, not raised: the
    next one tries again."""

    def __init__(self, every_s: float, fn: Callable[[], None]):
        self.every_s, self.fn = every_s, fn
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Ticker:
        self._thread = threading.Thread(target=self._run, name="night-autosave", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.fn()
            except Exception as exc:  # a busy database: the next tick saves
                log.warning("the night's clock was not saved this time: %s", exc)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


class NightClock:
    """The deadline and the plan's seconds per stage; decides what may start and keeps the night as run."""

    def __init__(self, hours: float | None, *, trials: int | None = None, stored: dict | None = None,
                 clock: Callable[[], float] | None = None):
        self.hours, self.trials = hours, trials
        self._clock = clock or time.monotonic  # looked up now, not at import: a test may script it
        self.started = self._clock()
        # the same --hours goes on where it stopped, or, where that night ended (and --trials asks no more), is
        # over; another --hours (or, ended, another --trials) is a new night
        same = stored is not None and stored.get("hours") == hours
        self.over = same and hours is not None and bool(stored.get("ended")) and stored.get("trials") == trials
        self.stored = stored if self.over else None
        old = stored if same and not stored.get("ended") else {}
        self.spent_before = float(old.get("spent_s", 0.0))
        self.rows: dict[str, dict] = {k: dict(v) for k, v in (old.get("rows") or {}).items()}
        self.cuts: list[str] = list(old.get("cuts") or [])
        self.first: dict[str, float] | None = old.get("first_plan")
        self.search_stopped: str | None = old.get("search_stopped")  # why the search stopped before --trials
        self.after: dict[str, float] = {}  # the latest plan: seconds of each stage after the search, if it runs
        self.reserve: dict[str, float] = {}  # what the search keeps of them (forecast.reserve)
        self.trial_s: float | None = None
        self.ended = False
        self._lock = threading.RLock()  # the autosave thread reads what the loop writes
        self._study: optuna.Study | None = None

    # ---- the plan ----

    def set_plan(self, after: dict[str, float], *, trial_s: float, reserve: dict[str, float] | None = None,
                 first: dict[str, float] | None = None) -> None:
        """The latest plan's seconds: each stage after the search where it runs (`after`), what the search keeps of
        them (`reserve`; default `after`), one candidate trial, and, kept from the first call only, the first plan
        scheduled into the night (`first`: the search and each stage after it; default the search's 0 and `after`)."""
        self.after = {name: after.get(name, 0.0) for name in AFTER_SEARCH}
        self.reserve = {name: (after if reserve is None else reserve).get(name, 0.0) for name in AFTER_SEARCH}
        self.trial_s = trial_s
        if self.first is None:
            self.first = dict(first) if first is not None else {SEARCH: 0.0, **self.after}

    def after_search_s(self) -> float:
        """What the search keeps for the stages after it."""
        return sum(self.reserve.values())

    # ---- the deadline ----

    def elapsed_s(self) -> float:
        return self.spent_before + self._clock() - self.started

    def left_s(self) -> float | None:
        return None if self.hours is None else self.hours * 3600.0 - self.elapsed_s()

    def stage_budget_s(self, stage: str) -> float | None:
        """The seconds `stage` may spend from now while keeping the reserve of the stages that must follow it (their
        `reserve`, and once a minimization runs, its gates' whole time); None where no deadline bounds the night.

        Raises:
            ValueError: an unknown stage name (autoresearch.ground.stages).
        """
        if stage not in _ORDER:
            raise ValueError(f"unknown stage {stage!r}: one of {_ORDER}")
        left = self.left_s()
        if left is None:
            return None
        later = _ORDER[_ORDER.index(stage) + 1:]
        keep = {name: self.reserve.get(name, 0.0) for name in later}
        if stage == MINIMIZE:
            keep |= {name: self.after.get(name, 0.0) for name in _GATES}
        return max(left - sum(keep.values()), 0.0)

    def may_start(self, trial_s: float) -> str | None:
        """None where one more trial of `trial_s` fits in the search's budget; else why not."""
        budget = self.stage_budget_s(SEARCH)
        if budget is None or trial_s <= budget:
            return None
        stages = ", ".join(f"{name} {_dur(s)}" for name, s in self.reserve.items() if s)
        return (f"the search stops: one more trial ({_dur(trial_s)}) and the stages after it ({stages}) need "
                f"{_dur(trial_s + self.after_search_s())}, and {_dur(max(self.left_s(), 0.0))} of --hours "
                f"{self.hours:g} is left")

    def minimize_bound(self, *, per_launch_s: float, launches: int, changes: int,
                       extra_launches: int) -> tuple[int | None, str | None]:
        """The minimization's launch bound that fits in its budget (stage_budget_s: its gates and the report kept),
        or a cut.

        Returns (bound, None) where it fits, (None, None) where no deadline bounds it, (None, why) where not even
        its ranking round (launches x (changes + 1)) and one attempt (2 x launches) fit beside its `extra_launches`
        (the TabbyAPI subsets'): the confirmed champion is then exported, not minimized."""
        budget = self.stage_budget_s(MINIMIZE)
        if budget is None:
            return None, None
        fit = math.floor(budget / per_launch_s) - extra_launches
        need = least_minimization(launches, changes)
        if fit >= need:
            return fit, None
        gates = " and ".join(f"{name.removeprefix('gating ')}'s gate ({_dur(self.after[name])})"
                             for name in _GATES if self.after.get(name))
        self.cut(f"not minimized: the minimization's ranking round and one attempt need {need + extra_launches} "
                 f"launches ({_dur((need + extra_launches) * per_launch_s)}), and {_dur(budget)} was left for them "
                 f"before the deadline{', ' + gates if gates else ''} and the report kept; the confirmed champion is "
                 "exported as it was confirmed")
        return None, self.cuts[-1]

    def may_judge(self, judged_before: int, *, judgment_s: float, report_s: float) -> str | None:
        """None where a finalist's judgment may start (the first always: it is what the night is for); else why
        not (the second cut, after the minimization's)."""
        left = self.left_s()
        if judged_before == 0 or left is None or judgment_s + report_s <= left:
            return None
        self.cut(f"finalist not judged: a judgment takes about {_dur(judgment_s)} and {_dur(max(left, 0.0))} was "
                 "left before the deadline (the minimization gives way first)")
        return self.cuts[-1]

    def cut(self, why: str) -> None:
        """A stage the deadline cut, said in RESULTS.md."""
        with self._lock:
            self.cuts.append(why)

    # ---- the night as run ----

    @contextlib.contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        """Time one stage (a stage that runs several times, e.g. TASKS, adds up) into the night as run; the night is
        saved as it starts and ends."""
        planned = self.after.get(stage) if stage != SEARCH else None
        started = self._clock()
        self.checkpoint()
        try:
            yield
        finally:
            self.add(stage, self._clock() - started, planned_s=planned)
            self.checkpoint()

    def add(self, stage: str, seconds: float, *, planned_s: float | None = None) -> None:
        with self._lock:
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
        with self._lock:
            return [{"stage": name, "first_s": first.get(name), "planned_s": self.rows[name]["planned_s"],
                     "measured_s": self.rows[name]["measured_s"], "runs": self.rows[name]["runs"]}
                    for name in _ORDER if name in self.rows]

    def to_dict(self) -> dict:
        with self._lock:
            return {"hours": self.hours, "trials": self.trials, "spent_s": round(self.elapsed_s(), 3),
                    "rows": {k: dict(v) for k, v in self.rows.items()}, "cuts": list(self.cuts),
                    "search_stopped": self.search_stopped, "first_plan": self.first, "ended": self.ended,
                    "table": self.table(), "total_first_s": sum((self.first or {}).values()) or None}

    def save(self, study: optuna.Study) -> None:
        study.set_user_attr(NIGHT_KEY, self.to_dict())

    def checkpoint(self) -> None:
        """Save the night now, where `autosave` names the study (the loop calls it at every stage's start)."""
        if self._study is not None:
            self.save(self._study)

    @contextlib.contextmanager
    def autosave(self, study: optuna.Study, every_s: float = AUTOSAVE_S) -> Iterator[None]:
        """Save the night to `study` at every checkpoint and every `every_s` (a Ticker) while the block runs."""
        self._study = study
        ticker = Ticker(every_s, lambda: self.save(study)).start()
        try:
            yield
        finally:
            ticker.stop()
            self._study = None

    def ended_line(self) -> str:
        """What the same command says when its night is over (`over`): its record is kept, nothing runs."""
        stored = self.stored or {}
        return (f"the night of --hours {self.hours:g} ended after {_dur(stored.get('spent_s') or 0.0)}: its record "
                "is kept and nothing runs (RESULTS.md has it; `report` writes it again; another --hours or --trials "
                "starts a new night)")
