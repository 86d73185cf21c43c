"""What a night buys, predicted from rates: trials through each stage, the task tier's judgments, the
power of each judged taskset and how many of its answers will hit the token budget.

Why: the task tier costs hours on a thinking model on a consumer GPU, and a night that cannot judge
its champion with the claimed power is better refused before it starts than discovered in the
morning. The loop prints the plan before the first trial (from stated or assumed rates) and again
once the baseline has measured its own (`measured_rates`); `python -m autoresearch plan` prints it
without running anything.

The arithmetic, all of it here:
- a candidate trial costs launch + bench + fidelity (the cheap stages every trial keeps);
- a judged candidate answers, per taskset, the expected length of the sequential test's walk: from the
  walks this study's judged candidates took, where some were judged, else on a lossless change at the
  design's planned discordance (eval.sequential, exact: an upper estimate where changes flip nothing);
- the baseline answers its first answers in its own trial, then lazily as far as the longest of the judged
  walks (the expected maximum of J independent walks), relaunched each time a walk outruns both its first
  answers and every earlier walk; such a walk's candidate has answered ahead of the baseline first (the
  tier's lookahead), past where its walk ends; in the finalists' scope each judged finalist is launched too;
- one answering call (a taskset's verifiers worker) costs a fixed start, measured (0 where stated), and
  one task costs (prompt / prefill rate + answered tokens / decode rate) / batch gain, where a
  stated answer length A under a budget B answers A (1 - exp(-B/A)) tokens and is truncated with
  probability exp(-B/A) (answer lengths assumed exponential: a stated assumption, printed);
- the finalists' stage costs (finalists + 1) x finalist_launches x (launch + bench);
- in the finalists' scope one judgment is planned: the fastest qualified finalist's (the next is judged only
  if it fails, and only where it fits: NightClock.may_judge);
- the minimization costs its launches x (launch + bench) (autoresearch.night_plan: its ranking round and each
  change tried once, and the TabbyAPI subsets'), and each gate that follows it (the minimal champion's, and with
  the exllamav3 engine the TabbyAPI subset's) a launch, fidelity and one more judgment (the marginal cost of
  judging one candidate more); the report its measured seconds.
What the search keeps before it starts a trial (`Forecast.reserve`, the loop's reserve: autoresearch.night.clock)
is what a champion needs: the finalists' stage, one judgment, the report. The policy (MINIMIZE_SHARE) adds the
minimization and its gates only on a night where their least (its ranking round and one attempt, with the gates)
fits in a quarter of --hours, and then up to that quarter; otherwise they take what the search leaves. The plan
prints the policy and what it decided; its schedule (the first plan the night is held against) never passes
--hours, and what does not fit is a problem of the plan (CANNOT), with the least --hours that fits.

Usage:
    rates = stated_rates(suite, decode_tok_s=43, prefill_tok_s=700, answer_tokens=3000)   # autoresearch.night.rates
    forecast = plan_night(rates, policy=TaskPolicy(), hours=8, finalists=2, finalist_launches=2,
                          minimize_launches=26, minimize_least=18, tabbyapi=True)
    print(forecast.text())
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
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
from autoresearch.night.rates import BASELINE_STAGES, CHEAP_STAGES, UNKNOWN_TASKS, Rates
from eval.decision import TaskPolicy
from eval.sequential import SequentialDesign
from eval.walks import longest_walk_past, lookahead, quiet_walk, walk_survival

__all__ = ["MINIMIZE_SHARE", "SCOPES", "Forecast", "baseline_relaunches", "plan_night"]

SCOPES = ("finalists", "every")
MINIMIZE_SHARE = 0.25  # of --hours: the most the search keeps for the minimization and its gates (the policy)



# ---- the lazy baseline's relaunches ----

def baseline_relaunches(survival: Sequence[float], walks: int, first: int) -> list[float]:
    """P(the k-th judged walk needs the baseline to answer on), k = 1..walks: it runs past both the baseline's
    first answers and every earlier walk. P = sum over t > first of P(W = t) P(every earlier walk < t)."""
    out = []
    for k in range(1, walks + 1):
        out.append(sum((survival[t - 1] - survival[t]) * (1.0 - survival[t - 1]) ** (k - 1)
                       for t in range(max(first, 0) + 1, len(survival))))
    return out


# ---- the plan ----

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
        h = _hours
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
        h = _hours
        night = f"{self.bound} (about {_hours(self.hours * 3600)})" if self.bound else f"--hours {self.hours:g}"
        lines = [f"Night plan for {night} (task tier on {self.scope}); rates {self.rates.source}."]
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


def _hours(seconds: float) -> str:
    if seconds < 90:  # a 0.5B's candidate: "21 s", not "0 min"
        return f"{seconds:.0f} s"
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def plan_night(rates: Rates, *, policy: TaskPolicy, hours: float, finalists: int, finalist_launches: int,
               scope: str = "finalists", judging: bool = True, suggest: bool = True,
               baseline_first: int = 0, minimize_launches: float = 0.0, minimize_least: float | None = None,
               tabbyapi: bool = False, report_s: float = 0.0, bound: str | None = None) -> Forecast:
    """The plan; its problems name what the night cannot do, its advice what would. `baseline_first`: the
    tasks per taskset the baseline answers in its own trial (autoresearch.checks.task_tier.first_answers), before
    any judgment: only walks past them cost the baseline answers and a relaunch. `minimize_launches`: the
    minimization's launches, each change tried once (0: no minimization, and no minimal gate), `minimize_least`
    its ranking round and one attempt (default: all of them), `tabbyapi` whether the TabbyAPI subset's gate may
    follow it (the exllamav3 engine); `report_s`: one report's seconds. `bound`: what ends a run that --hours does
    not (e.g. "--trials 6", `hours` its planned length): no deadline, every stage whole.

    Raises:
        ValueError: an unknown scope or non-positive hours.
    """
    given = {"policy": policy, "hours": hours, "finalists": finalists, "finalist_launches": finalist_launches,
             "scope": scope, "judging": judging, "baseline_first": baseline_first,
             "minimize_launches": minimize_launches, "minimize_least": minimize_least, "tabbyapi": tabbyapi,
             "report_s": report_s, "bound": bound}
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}, got {scope!r}")
    if not hours > 0:
        raise ValueError(f"hours must be > 0, got {hours}")
    design = policy.design(len(rates.tasksets)) if rates.tasksets else None
    budget = hours * 3600.0
    r = rates
    baseline_s = 2 * (r.launch_s + r.bench_s + r.fidelity_s)
    cheap_s = r.launch_s + r.bench_s + r.fidelity_s
    finalists_s = (finalists + 1) * finalist_launches * (r.launch_s + r.bench_s)

    answered = {t.name: t.answered for t in r.tasksets}

    def first(n: int, name: str = "") -> int:  # what the baseline has answered before a judgment needs more
        return min(max(baseline_first, answered.get(name, 0)), n) if judging else n

    survivals = {t.name: walk_survival(design, t.tasks or UNKNOWN_TASKS, walks=t.walks) for t in r.tasksets}

    def tasksets_for(judged: int) -> list[TasksetPlan]:
        out = []
        for t in r.tasksets:
            n = t.tasks or UNKNOWN_TASKS
            survival = survivals[t.name]
            walk = sum(survival) if judging else n
            baseline = first(n, t.name) + longest_walk_past(survival, judged, first(n, t.name)) if judging else n
            out.append(TasksetPlan(name=t.name, tasks=n, tasks_known=t.tasks is not None,
                                   power=design.power_at(n) if judging else 0.0, walk_tasks=walk,
                                   baseline_tasks=baseline, truncated_share=t.truncated_share, task_s=t.task_s,
                                   call_s=t.call_s, first_s=first(n, t.name) * t.task_s + t.call_s))
        return out

    def judgment_cost(judged: int) -> float:
        plans = tasksets_for(judged)
        answers = sum((judged * p.walk_tasks + p.baseline_tasks - first(p.tasks, p.name)) * p.task_s for p in plans)
        # The lazy baseline answers on only when a walk outruns its first answers and every earlier walk: a
        # call per taskset that needs it, and a relaunch when any does (tasksets taken as independent).
        needs = {p.name: baseline_relaunches(survivals[p.name], judged, first(p.tasks, p.name))
                 if judging else [0.0] * judged for p in plans}
        relaunches = sum(1.0 - math.prod(1.0 - needs[t.name][k] for t in r.tasksets) for k in range(judged))
        calls = sum((judged + sum(needs[t.name])) * t.call_s for t in r.tasksets)
        # and before that, the candidate answered ahead of the baseline (autoresearch.checks.task_tier's lookahead)
        ahead = sum(sum(needs[p.name]) * _answered_ahead(design, survivals[p.name], first(p.tasks, p.name)) * p.task_s
                    for p in plans) if judging else 0.0
        launched = judged if scope == "finalists" else 0  # in its trial, a candidate's server is already up
        return answers + ahead + calls + (launched + relaunches) * r.launch_s if r.tasksets else 0.0

    # the baseline's own answers, in its first launch: one call per taskset
    baseline_s += sum(first(t.tasks or UNKNOWN_TASKS, t.name) * t.task_s + t.call_s for t in r.tasksets)
    per_launch_s = r.launch_s + r.bench_s
    minimization_s = minimize_launches * per_launch_s
    least = minimize_launches if minimize_least is None else min(minimize_least, minimize_launches)

    def gate_s(judged: int) -> float:  # the minimal champion: a launch, fidelity, one judgment more
        if not minimize_launches:
            return 0.0
        more = judgment_cost(judged + 1) - judgment_cost(judged)
        return r.fidelity_s + more + (0.0 if scope == "finalists" and r.tasksets else r.launch_s)

    if scope == "finalists":  # the fastest qualified finalist; another only if it fails and its judgment fits
        judged = min(finalists, 1) if r.tasksets else 0
        judgment_s = judgment_cost(judged)
        trial_s = cheap_s
        gate = gate_s(judged)
    else:  # every candidate past fidelity: judged inside its trial (the baseline's answers grow with them)
        trial_s = cheap_s + judgment_cost(1)
        gate = gate_s(1)  # the gate's judgment: about one more candidate's
    tabbyapi_gate = gate if tabbyapi else 0.0
    kept = int(minimize_launches) if bound else _kept_launches(minimize_launches, least, per_launch_s,
                                                                gate + tabbyapi_gate, budget)
    tail = (kept * per_launch_s + gate + tabbyapi_gate if kept else 0.0) + report_s
    if scope == "finalists":
        trials = max(int((budget - baseline_s - finalists_s - judgment_s - tail) // trial_s), 0)
    else:
        trials = max(int((budget - baseline_s - finalists_s - tail) // trial_s), 0)
        judged = trials if r.tasksets else 0
        judgment_s = judgment_cost(judged) if judged else 0.0
    plans = tasksets_for(max(judged, 1))
    problems = _taskset_problems(r, policy, plans) if judging else []
    fixed = baseline_s + finalists_s + (judgment_s if scope == "finalists" else 0.0) + tail
    if judging and scope == "finalists" and fixed + cheap_s * max(finalists, 1) > budget:
        problems.append(f"the baseline, {judged} judged finalist(s), the finalists' stage" +
                        (", the minimization and its gates" if kept else "") +
                        f" take {_hours(fixed)}, leaving no time to search {max(finalists, 1)} candidate(s) in {hours:g} h")
    if judging and scope == "every" and trials < 1:
        problems.append(f"one judged candidate takes {_hours(trial_s)}: none fits in {hours:g} h after the baseline")
    advice = _advice(rates, given, bool(_truncating(r, policy))) if problems and suggest and not bound else ()
    basis = _walk_basis(r, design, plans) if judging and r.tasksets else ""
    return Forecast(hours=hours, scope=scope, rates=rates, baseline_s=baseline_s, trial_s=trial_s, trials=trials,
                    judgments=judged, judgment_s=judgment_s,  # smoke and guard answer every task: they cost too
                    finalists_s=finalists_s, tasksets=tuple(plans), claimed_power=policy.power,
                    problems=tuple(problems), advice=tuple(advice), judging=judging, walk_basis=basis, bound=bound,
                    minimize_launches=minimize_launches, minimization_s=minimization_s, minimize_least=least,
                    minimize_kept=kept, minimization_kept_s=kept * per_launch_s, minimal_gate_s=gate,
                    tabbyapi_gate_s=tabbyapi_gate, report_s=report_s)


def _kept_launches(launches: float, least: float, per_launch_s: float, gates_s: float, budget_s: float) -> int:
    """The policy: the minimization's launches the search keeps (beside its gates), where its least and its gates
    fit in MINIMIZE_SHARE of the night, up to that share; none where they do not (it takes what the search leaves)."""
    share = MINIMIZE_SHARE * budget_s - gates_s
    if not launches or least * per_launch_s > share:
        return 0
    return min(int(share // per_launch_s), int(launches))


def _taskset_problems(rates: Rates, policy: TaskPolicy, plans: Sequence[TasksetPlan]) -> list[str]:
    """Tasksets too small for the claimed power, or whose answers would hit the token budget too often."""
    problems = []
    for p in plans:
        if p.power < policy.power:
            problems.append(f"{p.name}: {p.tasks} tasks give power {p.power:.0%} against a "
                            f"{policy.min_drop:.0%} drop, below the claimed {policy.power:.0%}")
        if p.truncated_share > policy.max_truncated_share:
            problems.append(f"{p.name}: {p.truncated_share:.0%} of answers would hit the {_budget(rates, p.name)}-token "
                            f"budget (the baseline is refused above {policy.max_truncated_share:.0%})")
    return problems


def _answered_ahead(design: SequentialDesign, survival: Sequence[float], answered: int) -> float:
    """Tasks a candidate answers past its walk when the walk outruns the baseline's `answered`: it answers on
    to `answered` + the lookahead before the baseline is launched, and its walk takes
    E[W - answered | W > answered] of them. `survival`: walk_survival's, over the taskset's n tasks."""
    n_tasks = len(survival) - 1
    if answered >= n_tasks or survival[answered] <= 0:
        return 0.0
    overshoot = sum(survival[answered:]) / survival[answered]
    return max(min(lookahead(design, n_tasks), n_tasks - answered) - overshoot, 0.0)


def _walk_basis(rates: Rates, design: SequentialDesign, plans: Sequence[TasksetPlan]) -> str:
    """Where the plan's walk lengths come from, said with it."""
    measured = [len(t.walks) for t in rates.tasksets if t.walks]
    if measured:
        return f"as this study's judged candidates walked ({max(measured)} judged)"
    quiet = min((quiet_walk(design, p.tasks) for p in plans), default=0)
    return (f"at the design's planned discordance ({design.planned_discordance:.0%} of tasks flipped) until a "
            f"candidate is judged; a change that flips none walks {quiet}")


def _budget(rates: Rates, name: str) -> int:
    return next(t.max_tokens for t in rates.tasksets if t.name == name)


def _truncating(rates: Rates, policy: TaskPolicy) -> list[str]:
    """The tasksets whose answers would hit the token budget too often: more hours do not help them."""
    return [t.name for t in rates.tasksets if t.truncated_share > policy.max_truncated_share]


def _advice(rates: Rates, given: dict, truncating: bool) -> list[str]:
    """What would make the claim: more hours (the least that fits, re-planned), a weaker claim, fewer tasks, fewer
    finalists; each re-planned with everything else as `given`."""
    policy, hours, finalists = given["policy"], given["hours"], given["finalists"]

    def fits(r: Rates = rates, **changes) -> bool:
        return plan_night(r, **(given | changes), suggest=False).fits

    if truncating:
        return ["raise --suite-max-tokens so fewer answers hit the budget (the truncated share above assumes "
                "the stated answer length)"]
    out: list[str] = []
    more = _least_hours(lambda h: fits(hours=h), hours)
    out.append(f"--hours {more:g} (the same claim)" if more is not None else
               f"more than {_MOST_HOURS:g} hours for the same claim")
    for drop in (0.075, 0.10, 0.15, 0.20):
        if drop <= policy.min_drop or drop > policy.planned_discordance:
            continue
        if fits(policy=dataclasses.replace(policy, min_drop=drop)):
            out.append(f"--task-min-drop {drop:g} (a weaker claim: a {drop * 100:g}-point drop, shorter walks)")
            break
    if len(rates.tasksets) > 1:
        for t in rates.tasksets:
            rest = dataclasses.replace(rates, tasksets=tuple(x for x in rates.tasksets if x is not t))
            if fits(rest):
                out.append(f"--suite-tasksets {','.join(x.name for x in rest.tasksets)} (fewer tasks: "
                           f"{t.name} not judged)")
                break
    if given["scope"] == "finalists" and finalists > 1 and fits(finalists=1):
        out.append("--finalists 1 (one judged candidate: the fastest one)")
    return out


_STEP_HOURS = 0.25  # the advice's --hours: a multiple of a quarter hour
_MOST_HOURS = 168.0  # a week: past it, more hours is no advice


def _least_hours(fits, hours: float) -> float | None:
    """The least multiple of _STEP_HOURS above `hours` where `fits(h)`, or None below _MOST_HOURS (doubling, then
    halving the step: a plan that fits at H fits at more, its search only growing)."""
    low = math.floor(hours / _STEP_HOURS)  # steps known not to fit (`hours` itself did not)
    high = low + 1
    while not fits(high * _STEP_HOURS):
        if high * _STEP_HOURS >= _MOST_HOURS:
            return None
        low, high = high, min(2 * high, math.ceil(_MOST_HOURS / _STEP_HOURS))
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if fits(mid * _STEP_HOURS) else (mid, high)
    return high * _STEP_HOURS
