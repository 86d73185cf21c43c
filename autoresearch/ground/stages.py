"""The run's stages by name: one vocabulary for the night plan (autoresearch.night.forecast), the loop's reserve
(autoresearch.night.clock) and the progress display (autoresearch.night.progress), so that every stage the display
shows finds its planned seconds under the same name."""

from __future__ import annotations

__all__ = ["AFTER_SEARCH", "FINALISTS", "MINIMAL_GATE", "MINIMIZE", "REPORT", "SEARCH", "TASKS"]

SEARCH = "search"  # the baseline and the candidates' trials
FINALISTS = "confirming finalists"  # the finalists' and the baseline's fresh launches
TASKS = "tasks"  # one task-tier judgment (a candidate's stage, and each finalist's)
MINIMIZE = "minimizing the champion"
MINIMAL_GATE = "gating the minimal champion"
REPORT = "report"  # RESULTS.md, written at the end of each stage
AFTER_SEARCH = (FINALISTS, TASKS, MINIMIZE, MINIMAL_GATE, REPORT)  # in the order they run
