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

    def trial_started(self, number: int, role: str, digest: str) -> None:
        self.trial, self.role, self.stage_name = number, role, "start"
        log.info("trial %d (%s) config %s", number, role, digest[:12])
        self._refresh()

    def stage(self, name: str) -> None:
        self.stage_name = name
        log.info("trial %s: %s", self.trial, name)
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
        table.add_row("finished trials", str(self.done))
        table.add_row("best so far", self.best)
        return table

    def _refresh(self) -> None:
        if self._live:
            self._live.update(self._render())
