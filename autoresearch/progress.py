"""Live progress for people: trial, stage, elapsed and remaining time, best so far.

A rich Live panel on a terminal; plain log lines otherwise (CI, files). Fed by the loop only.
"""

from __future__ import annotations

import logging
import sys
import time

from rich.console import Console
from rich.live import Live
from rich.table import Table

__all__ = ["Progress"]

log = logging.getLogger(__name__)


class Progress:
    def __init__(self, *, study: str, trials: int | None, hours: float | None, live: bool | None = None):
        self.study = study
        self.trials = trials
        self.deadline = time.monotonic() + hours * 3600 if hours else None
        self.started = time.monotonic()
        self.trial: int | None = None
        self.role = ""
        self.stage_name = ""
        self.done = 0
        self.best = "none yet"
        self.stage_started = time.monotonic()
        self.plan_stage_s: dict[str, float] = {}  # the night plan's seconds per stage (autoresearch.forecast)
        self.plan_end: float | None = None  # when the plan expects the study to end (monotonic)
        self.console = Console(stderr=True)
        use_live = sys.stderr.isatty() if live is None else live
        self._live = Live(self._render(), console=self.console, refresh_per_second=2) if use_live else None

    def __enter__(self) -> Progress:
        if self._live:
            self._live.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._live:
            self._live.stop()

    def set_plan(self, stage_s: dict[str, float], total_s: float) -> None:
        """The night plan's predictions: the ETA of each stage and of the study."""
        self.plan_stage_s = dict(stage_s)
        self.plan_end = self.started + total_s
        self._refresh()

    def eta(self, now: float | None = None) -> tuple[float | None, float | None]:
        """Seconds left in the current stage and in the study, as the plan predicts them (None: no prediction)."""
        now = time.monotonic() if now is None else now
        stage = self.plan_stage_s.get(self.stage_name)
        stage_left = max(stage - (now - self.stage_started), 0.0) if stage is not None else None
        study_left = max(self.plan_end - now, 0.0) if self.plan_end is not None else None
        return stage_left, study_left

    def trial_started(self, number: int, role: str, digest: str) -> None:
        self.trial, self.role, self.stage_name = number, role, "start"
        log.info("trial %d (%s) config %s", number, role, digest[:12])
        self._refresh()

    def stage(self, name: str) -> None:
        self.stage_name = name
        self.stage_started = time.monotonic()
        stage_left, study_left = self.eta()
        eta = "" if stage_left is None and study_left is None else \
            f" (plan: stage {_minutes(stage_left)}, study {_minutes(study_left)} left)"
        log.info("trial %s: %s%s", self.trial, name, eta)
        self._refresh()

    def trial_finished(self, completed: int, best: str) -> None:
        self.done, self.best = completed, best
        log.info("trials finished: %d; best so far: %s", completed, best)
        self._refresh()

    def _remaining(self) -> str:
        parts = []
        if self.trials is not None:
            parts.append(f"{max(self.trials - self.done, 0)} trials")
        if self.deadline is not None:
            parts.append(f"{max(self.deadline - time.monotonic(), 0) / 60:.0f} min")
        return " / ".join(parts) or "-"

    def _render(self) -> Table:
        table = Table(title=f"autoresearch: {self.study}", show_header=False)
        table.add_row("trial", f"{self.trial} ({self.role})" if self.trial is not None else "-")
        table.add_row("stage", self.stage_name or "-")
        table.add_row("elapsed", f"{(time.monotonic() - self.started) / 60:.1f} min")
        table.add_row("remaining", self._remaining())
        stage_left, study_left = self.eta()
        if stage_left is not None or study_left is not None:
            table.add_row("ETA (plan)", f"stage {_minutes(stage_left)}, study {_minutes(study_left)}")
        table.add_row("finished trials", str(self.done))
        table.add_row("best so far", self.best)
        return table

    def _refresh(self) -> None:
        if self._live:
            self._live.update(self._render())


def _minutes(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 60:.0f} min"
