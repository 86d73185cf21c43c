"""Live progress for people: a bar and an ETA for the study and the current stage, elapsed, best so far.

A rich Live panel on a terminal (redrawn every second, so "elapsed" ticks between events); plain
log lines otherwise (CI, files). Fed by the loop only.

The ETAs come from this run's own timings: a stage is expected to take as long as that stage took
on average in this run's earlier trials, a candidate's trial as long as this run's candidates did. A
planner that predicts better (from the plan, before any trial ran) passes `forecast`: `forecast(name)`
gives the seconds it expects stage `name` (or "trial", a whole candidate trial) to take, or None where
it has no prediction, and is asked before the measured means. Stage names are autoresearch.ground.stages';
the baseline trial's "tasks" stage, its first answers, is BASELINE_ANSWERS (a candidate's judgment is another
length). `on_stage(name)` is told each stage as it starts, before its ETA is asked: the loop re-plans there once
the baseline's bench has measured this machine.

The study's ETA covers the whole run: the search left (the trials --trials allows at the expected
trial time, or until the search must stop for the stages after it to end by the deadline) and each
stage after the search (`after_search`: the night plan's seconds per stage, autoresearch.night.clock), less
what each has taken. The panel shows the deadline.
"""

from __future__ import annotations

import datetime as dt
import logging
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table

from autoresearch.ground.stages import AFTER_SEARCH, BASELINE_ANSWERS, REPORT, TASKS

__all__ = ["Forecast", "Progress", "format_duration"]

log = logging.getLogger(__name__)
Forecast = Callable[[str], "float | None"]  # stage name or "trial" -> expected seconds, None: no prediction


def format_duration(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class Progress:
    def __init__(self, *, study: str, trials: int | None, hours: float | None, live: bool | None = None,
                 forecast: Forecast | None = None, clock: Callable[[], float] | None = None,
                 after_search: Callable[[], dict[str, float]] | None = None,
                 reserve: Callable[[], dict[str, float]] | None = None,
                 on_stage: Callable[[str], None] | None = None):
        self.study = study
        self.trials = trials
        self.forecast = forecast
        self.after_search = after_search  # the plan's seconds of each stage after the search (autoresearch.night.clock)
        self.reserve = reserve or after_search  # what the search keeps of them (autoresearch.night.clock)
        self.on_stage = on_stage
        self._clock = clock or time.monotonic  # looked up now, not at import: a test may script it
        self.started = self._clock()
        self.deadline = self.started + hours * 3600 if hours else None  # a resumed night: the loop sets what is left
        self.searching = True
        self._tail_at = -1  # the index in AFTER_SEARCH of the latest stage after the search that started
        self.trial: int | None = None
        self.role = ""
        self.stage_name = ""
        self.done = 0
        self.best = "none yet"
        self._trial_started: float | None = None
        self._stage_started = self.started
        self._stage_s: dict[str, list[float]] = defaultdict(list)  # this run's time per stage name
        self._trial_s: list[float] = []  # this run's time per candidate trial (the baseline's is its own)
        self.console = Console(stderr=True)
        use_live = sys.stderr.isatty() if live is None else live
        self._live = Live(get_renderable=self._render, console=self.console, refresh_per_second=1) if use_live else None

    def __enter__(self) -> Progress:
        if self._live:
            self._live.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._live:
            self._live.stop()

    # ---- events (from the loop) ----

    def trial_started(self, number: int, role: str, digest: str) -> None:
        self._end_stage()
        self.trial, self.role, self.stage_name = number, role, "start"
        self._trial_started = self._clock()
        log.info("trial %d (%s) config %s", number, role, digest[:12])

    def stage(self, name: str, *, trial: int | None = None) -> None:
        """Stage `name` starts (of trial `trial`, where a stage after the search judges one)."""
        self._end_stage()
        if name == AFTER_SEARCH[0]:  # the finalists' stage: the search is over (a candidate's "tasks" is not)
            self.searching, self.trial = False, None
        if name == TASKS and self.searching and self.role == "baseline":
            name = BASELINE_ANSWERS
        self.stage_name = name
        if trial is not None:
            self.trial = trial
        if not self.searching and name in AFTER_SEARCH:
            self._tail_at = max(self._tail_at, AFTER_SEARCH.index(name))
        if self.on_stage is not None:
            self.on_stage(name)
        eta = self.stage_eta_s()
        about = f" (about {format_duration(eta)})" if eta is not None else ""
        log.info("%s%s%s", f"trial {self.trial}: " if self.trial is not None else "", name, about)

    def trial_finished(self, completed: int, best: str) -> None:
        self._end_stage()
        self.stage_name = ""
        if self._trial_started is not None:
            if self.role != "baseline":
                self._trial_s.append(self._clock() - self._trial_started)
            self._trial_started = None
        self.done, self.best = completed, best
        eta = self.study_eta_s()
        left = f"; about {format_duration(eta)} left" if eta is not None else ""
        log.info("trials finished: %d%s; best so far: %s%s", completed,
                 f" of {self.trials}" if self.trials is not None else "", best, left)

    def reported(self, seconds: float) -> None:
        """RESULTS.md was written in `seconds` (between trials: timed apart from them)."""
        self._stage_s[REPORT].append(seconds)

    # ---- estimates ----

    def expected_s(self, name: str) -> float | None:
        """How long stage `name` (or "trial") should take: this run's median once it has timed it twice
        (measured beats predicted: on the real 0.5B the plan said 48 min for a judgment that took 1-2), else
        the forecast's, else the one time seen."""
        seen = self._trial_s if name == "trial" else self._stage_s.get(name) or []
        if len(seen) >= 2:
            return statistics.median(seen)
        predicted = self.forecast(name) if self.forecast is not None else None
        if predicted is not None:
            return predicted
        return seen[0] if seen else None

    def stage_eta_s(self) -> float | None:
        expected = self.expected_s(self.stage_name) if self.stage_name else None
        return None if expected is None else max(expected - (self._clock() - self._stage_started), 0.0)

    def study_eta_s(self) -> float | None:
        """Time left in the whole run: the search's and each stage's after it (see the module's docstring)."""
        tail = self.after_search() if self.after_search is not None else {}
        kept = self.reserve() if self.reserve is not None else tail
        by_deadline = None if self.deadline is None else max(self.deadline - self._clock(), 0.0)
        if not self.searching:
            left = self._tail_left_s(tail)
        else:
            search = self._search_left_s(sum(kept.values()))
            left = None if search is None else search + sum(tail.values())
        # the minimization takes what the deadline leaves, up to whole: the run ends by the deadline at the latest
        return left if left is None or by_deadline is None else min(left, by_deadline)

    def _search_left_s(self, after_s: float) -> float | None:
        """The trials --trials still allows at the expected trial time, or until the search stops for the stages
        after it (after_s) to end by the deadline, whichever comes first."""
        now, left = self._clock(), None
        per_trial = self.expected_s("trial")
        in_flight = now - self._trial_started if self._trial_started is not None else 0.0
        if self.trials is not None and per_trial is not None:
            left = max(max(self.trials - self.done, 0) * per_trial - min(in_flight, per_trial), 0.0)
        if self.deadline is not None:
            finishing = max((per_trial or 0.0) - in_flight, 0.0) if in_flight else 0.0  # a trial runs to its end
            until = max(self.deadline - after_s - now, finishing, 0.0)
            left = until if left is None else min(left, until)
        return left

    def _tail_left_s(self, tail: dict[str, float]) -> float:
        """Each stage after the search not passed yet: its planned seconds less what it has taken."""
        now, left = self._clock(), 0.0
        for i, name in enumerate(AFTER_SEARCH):
            if i < self._tail_at or name not in tail:
                continue
            spent = sum(self._stage_s.get(name) or []) if name != REPORT else 0.0
            if name == self.stage_name:
                spent += now - self._stage_started
            left += max(tail[name] - spent, 0.0)
        return left

    def study_fraction(self) -> float | None:
        """Elapsed over elapsed + ETA (never 100% while a stage is left); without an ETA, finished trials."""
        eta = self.study_eta_s()
        elapsed = self._clock() - self.started
        if eta is not None and elapsed + eta > 0:
            return min(elapsed / (elapsed + eta), 1.0)
        if self.trials is not None:
            return min(self.done / self.trials, 1.0) if self.trials else 1.0
        return None

    def deadline_text(self) -> str | None:
        """The deadline as a wall-clock time, and how far off it is."""
        if self.deadline is None:
            return None
        left = self.deadline - self._clock()
        at = dt.datetime.now() + dt.timedelta(seconds=left)
        return f"{at:%H:%M} (in {format_duration(left)})" if left > 0 else f"{at:%H:%M} (passed)"

    # ---- drawing ----

    def _end_stage(self) -> None:
        now = self._clock()
        if self.stage_name and self.stage_name != "start":
            self._stage_s[self.stage_name].append(now - self._stage_started)
        self._stage_started = now

    def _bar(self, fraction: float | None, eta: float | None) -> Group | str:
        text = f"ETA {format_duration(eta)}" if eta is not None else "ETA: after the first trial"
        if fraction is None:
            return text
        return Group(ProgressBar(total=1.0, completed=fraction, width=40), f"{fraction:.0%}, {text}")

    def _render(self) -> Table:
        now = self._clock()
        table = Table(title=f"autoresearch: {self.study}", show_header=False)
        table.add_row("study", self._bar(self.study_fraction(), self.study_eta_s()))
        table.add_row("trial", f"{self.trial} ({self.role})" if self.trial is not None else "-")
        expected = self.expected_s(self.stage_name) if self.stage_name else None
        in_stage = now - self._stage_started
        stage_bar = self._bar(min(in_stage / expected, 1.0) if expected else None, self.stage_eta_s())
        table.add_row("stage", Group(f"{self.stage_name or '-'} ({format_duration(in_stage)})", stage_bar)
                      if expected else f"{self.stage_name or '-'} ({format_duration(in_stage)}; no estimate yet)")
        table.add_row("elapsed", format_duration(now - self.started))
        if self.deadline is not None:
            table.add_row("deadline", self.deadline_text())
        table.add_row("finished trials", str(self.done) + (f" of {self.trials}" if self.trials is not None else ""))
        table.add_row("best so far", self.best)
        return table
