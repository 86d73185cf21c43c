"""The night plan as a record: each stage's seconds, what the search keeps for the stages after it (the policy),
the schedule the night is held against, and the plan's text. autoresearch.night.forecast computes it.

The policy (MINIMIZE_SHARE): the search keeps what a champion needs (the finalists' launches at their least, one
judgment, the report); the minimization and its gates are kept only on a night where their least fits in a
quarter of --hours, and then up to that quarter; otherwise they take what the search leaves, and a night that
leaves too little exports the confirmed champion, not minimized.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autoresearch.ground.stages import (
    BASELINE_ANSWERS,
    FINALISTS,
    MINIMAL_GATE,
    MINIMIZE,
    REPORT,
    SEARCH,
    TABBYAPI_GATE,
    TASKS,
)
from autoresearch.night.rates import BASELINE_STAGES, CHEAP_STAGES, Rates

__all__ = ["MINIMIZE_SHARE", "Forecast", "TasksetPlan", "hours_text"]

MINIMIZE_SHARE = 0.25  # of --hours: the most the search keeps for the minimization and its gates (the policy)


@dataclass(frozen=True, kw_only=True)
class TasksetPlan:
    name: str
    tasks: int  # the taskset's size (planned where it is known only after a run)
    tasks_known: bool
    power: float  # against a min_drop loss at the planned discordance, on `tasks` tasks
    walk_tasks: float  # expected per judged candidate
    baseline_tasks: float  # expected, answered lazily by the baseline
    truncated_share: float
    task_s: float
    call_s: float = 0.0
    first_s: float = 0.0  # the baseline's first answers on it, in its own trial


@dataclass(frozen=True, kw_only=True)
class Forecast:
    hours: float
    scope: str
    rates: Rates
    baseline_s: float
    trial_s: float  # one candidate through the cheap stages (and, scope every, its task tier)
    trials: int  # candidate trials that fit
    judgments: int
    judgment_s: float  # every judgment, the baseline's lazy answers included
    finalists_s: float
    tasksets: tuple[TasksetPlan, ...]
    claimed_power: float
    problems: tuple[str, ...]  # why the night cannot make its claim
    advice: tuple[str, ...]  # what would
    judging: bool = True  # False: smoke or guard mode, which answer every task (no sequential walk)
    bound: str | None = None  # what ends the run when it is not --hours (e.g. "--trials 6"): its hours are planned
    walk_basis: str = ""  # where the walk lengths come from, printed
    minimize_launches: float = 0.0  # the minimization's launches, each change tried once (0: none)
    minimization_s: float = 0.0
    minimize_least: float = 0.0  # its ranking round and one attempt: the least that minimizes anything
    minimize_kept: float = 0.0  # its launches the search keeps (the policy: none on a night too short)
    minimization_kept_s: float = 0.0
    minimal_gate_s: float = 0.0  # the minimal champion's launch, fidelity and judgment
    tabbyapi_gate_s: float = 0.0  # the TabbyAPI subset's, alike (exllamav3: where TabbyAPI cannot run it whole)
    report_s: float = 0.0

    @property
    def search_s(self) -> float:
        return self.baseline_s + self.trials * self.trial_s

    @property
    def gates_s(self) -> float:
        """The gates a minimization that ran must be followed by."""
        return self.minimal_gate_s + self.tabbyapi_gate_s

    @property
    def minimization_least_s(self) -> float:
        """The least minimization with its gates: what the policy compares with its share of the night."""
        return self.minimize_least * (self.minimization_s / self.minimize_launches) + self.gates_s \
            if self.minimize_launches else 0.0

    @property
    def minimization_kept(self) -> bool:
        return bool(self.minimize_kept)

    def after_search(self) -> dict[str, float]:
        """Seconds of each stage after the search where it runs, by the names the loop and the display use
        (autoresearch.night.clock): the finalists' launches at their least, one judgment, the minimization whole
        and its gates, the report."""
        return {FINALISTS: self.finalists_s, TASKS: self.judgment_s if self.scope == "finalists" else 0.0,
                MINIMIZE: self.minimization_s, MINIMAL_GATE: self.minimal_gate_s,
                TABBYAPI_GATE: self.tabbyapi_gate_s, REPORT: self.report_s}

    def reserve(self) -> dict[str, float]:
        """What the search keeps for the stages after it (the loop's reserve, autoresearch.night.clock): what a
        champion needs, and the minimization with its gates only where the policy keeps it (MINIMIZE_SHARE); a run
        bounded by --trials alone keeps every stage whole."""
        after = self.after_search()
        if self.bound:
            return after
        kept = self.minimization_kept
        return after | {MINIMIZE: self.minimization_kept_s, MINIMAL_GATE: after[MINIMAL_GATE] if kept else 0.0,
                        TABBYAPI_GATE: after[TABBYAPI_GATE] if kept else 0.0}

    @property
    def fits(self) -> bool:
        return not self.problems

    @property
    def need_s(self) -> float:
        """The whole run as planned: the search and what it keeps for the stages after it."""
        return self.search_s + sum(self.reserve().values())

    @property
    def total_s(self) -> float:
        """The whole run; under --hours it ends by the deadline (what does not fit is cut or refused: CANNOT)."""
        return self.need_s if self.bound else min(self.need_s, self.hours * 3600.0)

    def schedule(self) -> dict[str, float]:
        """The search and each stage after it as planned, in the order they run, each at most what the night has
        left when it starts (under --hours): the first plan the night as run is held against."""
        left = math.inf if self.bound else self.hours * 3600.0
        out = {}
        for name, seconds in {SEARCH: self.search_s, **self.reserve()}.items():
            out[name] = min(seconds, max(left, 0.0))
            left -= out[name]
        return out

    def stage_s(self) -> dict[str, float]:
        """Expected seconds of each stage as the progress display names it: a candidate's stages (TASKS: one
        judgment), the baseline's first answers, the search and each stage after it."""
        out = {name: getattr(self.rates, f"{name}_s") for name in CHEAP_STAGES}
        out |= {alias: out[name] for name, aliases in BASELINE_STAGES.items() for alias in aliases}  # the baseline's
        out |= {"reference": self.rates.fidelity_s, "feasibility": 0.0, "waiting for the baseline": 0.0}
        out[BASELINE_ANSWERS] = self.baseline_answers_s
        if self.judgments:
            out[TASKS] = self.judgment_s / self.judgments
        out |= {name: s for name, s in self.after_search().items() if name != TASKS}
        out[SEARCH] = self.search_s
        return out

    @property
    def baseline_answers_s(self) -> float:
        """The baseline's first answers, in its own trial: one call per taskset."""
        return sum(t.first_s for t in self.tasksets)

    def expected_s(self, name: str) -> float | None:
        """The progress display's forecast hook (autoresearch.night.progress): a stage's seconds, or "trial"'s."""
        return self.trial_s if name == "trial" else self.stage_s().get(name)

    def policy(self) -> str:
        """How the night splits its time between more candidates and a minimization, said with the plan."""
        return (f"the search keeps only what a champion needs (the finalists' launches, one judgment, the report); "
                f"the minimization and its gates are kept only where their least fits in {MINIMIZE_SHARE:.0%} of "
                "--hours, and then up to that share; otherwise they take what the search leaves, and a night that "
                "leaves too little exports the confirmed champion, not minimized")

    def _minimization_line(self) -> str:
        h = hours_text
        gates = f"its gate {h(self.minimal_gate_s)}" + (
            f", the TabbyAPI subset's gate {h(self.tabbyapi_gate_s)}" if self.tabbyapi_gate_s else "")
        whole = f"{self.minimize_launches:.0f} launches, each change tried once"
        if self.bound:
            return f"minimization: {h(self.minimization_s)} ({whole}), {gates}"
        if self.minimization_kept:
            return (f"minimization: {h(self.minimization_kept_s)} kept for it ({self.minimize_kept:.0f} of its "
                    f"{whole}; it also takes what the search leaves), {gates}")
        return (f"minimization: not kept: its least ({self.minimize_least:.0f} launches, its ranking round and one "
                f"attempt, with {gates}) takes {h(self.minimization_least_s)}, more than {MINIMIZE_SHARE:.0%} of "
                f"--hours {self.hours:g}; it takes what the search leaves ({whole}: {h(self.minimization_s)})")

    def text(self) -> str:
        h = hours_text
        night = f"{self.bound} (about {hours_text(self.hours * 3600)})" if self.bound else f"--hours {self.hours:g}"
        lines = [f"Night plan for {night} (task tier on {self.scope}); {self.rates.source}."]
        lines += [f"  assumed: {a}" for a in self.rates.assumptions]
        lines.append(f"  baseline: {h(self.baseline_s)} (2 launches, bench, fidelity reference and floor, its first answers)")
        cheap = " + ".join(f"{n} {getattr(self.rates, f'{n}_s'):.0f} s" for n in CHEAP_STAGES)
        lines.append(f"  each candidate: {cheap} = {h(self.trial_s)}" +
                     (" with its task tier" if self.scope == "every" else ""))
        lines.append(f"  trials through launch, bench and fidelity: {self.trials}")
        lines.append(f"  task-tier judgments: {self.judgments} ({h(self.judgment_s)}, the baseline's lazy answers "
                     "included" + ("; another finalist is judged only if this one fails and time is left)"
                                   if self.scope == "finalists" and self.judgments else ")"))
        lines.append(f"  finalists' stage: {h(self.finalists_s)}")
        if self.minimize_launches:
            lines.append(f"  {self._minimization_line()}")
        if self.report_s:
            lines.append(f"  report: {h(self.report_s)}")
        over = f" (the stages above need {h(self.need_s)}: see CANNOT)" if self.total_s < self.need_s else ""
        lines.append(f"  total: {h(self.total_s)} of {h(self.hours * 3600)}{over}")
        if self.minimize_launches and not self.bound:
            lines.append(f"  policy: {self.policy()}")
        lines.append("  per judged taskset: tasks, power at the claimed drop, tasks per judgment, baseline answers, "
                     "truncated answers, seconds per task" +
                     (", seconds to start each answering call" if any(t.call_s for t in self.rates.tasksets) else ""))
        if self.walk_basis:
            lines.append(f"  walks: {self.walk_basis}")
        for t in self.tasksets:
            size = f"{t.tasks}" + ("" if t.tasks_known else " (planned; known after the baseline runs)")
            lines.append(f"    {t.name}: {size} tasks, power {t.power:.0%}, {t.walk_tasks:.0f} per judgment, "
                         f"baseline {t.baseline_tasks:.0f}, truncated {t.truncated_share:.0%}, {t.task_s:.1f} s" +
                         (f", {t.call_s:.0f} s" if t.call_s else ""))
        for p in self.problems:
            lines.append(f"  CANNOT: {p}")
        for a in self.advice:
            lines.append(f"  would: {a}")
        if not self.judging:
            lines.append("  not the sequential test (--task-tier smoke or guard): every task is answered by both "
                         "sides, and the power above is not the claim (RESULTS.md states the guard's).")
        elif self.fits:
            lines.append(f"  fits: every judged taskset has power >= {self.claimed_power:.0%} within --hours.")
        return "\n".join(lines) + "\n"


def hours_text(seconds: float) -> str:
    if seconds < 90:  # a 0.5B's candidate: "21 s", not "0 min"
        return f"{seconds:.0f} s"
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"
