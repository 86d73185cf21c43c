"""The run's stages by name: one vocabulary for the night plan (autoresearch.night.forecast), the loop's reserve
(autoresearch.night.clock) and the progress display (autoresearch.night.progress), so that every stage the display
shows finds its planned seconds under the same name."""

from __future__ import annotations

__all__ = ["AFTER_SEARCH", "BASELINE_ANSWERS", "FINALISTS", "MINIMAL_GATE", "MINIMIZATION", "MINIMIZE", "REPORT",
           "SEARCH", "TABBYAPI_GATE", "TASKS"]

SEARCH = "search"  # the baseline and the candidates' trials
BASELINE_ANSWERS = "the baseline's first answers"  # the baseline trial's "tasks" stage, as the plan and display name it
FINALISTS = "confirming finalists"  # the finalists' and the baseline's fresh launches
TASKS = "tasks"  # one task-tier judgment (a candidate's stage, and each finalist's)
MINIMIZE = "minimizing the champion"
MINIMAL_GATE = "gating the minimal champion"
TABBYAPI_GATE = "gating the TabbyAPI subset"  # where TabbyAPI cannot run the minimal champion whole
REPORT = "report"  # RESULTS.md, written at the end of each stage
AFTER_SEARCH = (FINALISTS, TASKS, MINIMIZE, MINIMAL_GATE, TABBYAPI_GATE, REPORT)  # in the order they run
MINIMIZATION = (MINIMIZE, MINIMAL_GATE, TABBYAPI_GATE)  # the minimization and the gates that must follow it
