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
- the minimization costs its planned launches x (launch + bench) (autoresearch.night_plan: its ranking round
  and one attempt, and the TabbyAPI subsets; it takes what the deadline leaves), and the minimal champion's gate a launch, fidelity and one
  more judgment (the marginal cost of judging one candidate more); the report its measured seconds.
The stages after the search are what the loop keeps in reserve before it starts a trial (autoresearch.night.clock).

Usage:
    rates = stated_rates(suite, decode_tok_s=43, prefill_tok_s=700, answer_tokens=3000)   # autoresearch.night.rates
    forecast = plan_night(rates, suite=suite, policy=TaskPolicy(), hours=8, finalists=2, finalist_launches=2)
    print(forecast.text())
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from autoresearch.ground.stages import FINALISTS, MINIMAL_GATE, MINIMIZE, REPORT, SEARCH, TASKS
from autoresearch.night.rates import BASELINE_STAGES, CHEAP_STAGES, UNKNOWN_TASKS, Rates
from eval.decision import TaskPolicy
from eval.sequential import SequentialDesign
from eval.walks import longest_walk_past, lookahead, quiet_walk, walk_survival

__all__ = ["SCOPES", "Forecast", "baseline_relaunches", "plan_night"]

SCOPES = ("finalists", "every")



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
    minimize_kept: float = 0.0  # its launches kept in reserve: its ranking round and one attempt
    minimization_kept_s: float = 0.0
    minimal_gate_s: float = 0.0  # the minimal champion's launch, fidelity and judgment
    report_s: float = 0.0

    @property
    def search_s(self) -> float:
        return self.baseline_s + self.trials * self.trial_s

    def after_search(self) -> dict[str, float]:
        """Seconds of each stage after the search, by the names the loop and the display use
        (autoresearch.night.clock): what each is expected to take, the minimization whole."""
        return {FINALISTS: self.finalists_s, TASKS: self.judgment_s if self.scope == "finalists" else 0.0,
                MINIMIZE: self.minimization_s, MINIMAL_GATE: self.minimal_gate_s, REPORT: self.report_s}

    def reserve(self) -> dict[str, float]:
        """after_search() with the minimization at what is kept for it: what the loop keeps before it starts a
        trial (the minimization then takes what the deadline leaves, up to whole)."""
        return self.after_search() | {MINIMIZE: self.minimization_kept_s}

    @property
    def fits(self) -> bool:
        return not self.problems

    @property
    def total_s(self) -> float:
        """The whole run; under --hours the minimization takes at most what the deadline leaves."""
        total = self.search_s + sum(self.after_search().values())
        return total if self.bound else min(total, max(self.hours * 3600, self.search_s + sum(self.reserve().values())))

    def stage_s(self) -> dict[str, float]:
        """Expected seconds of each stage as the progress display names it: a candidate's stages (TASKS: one
        judgment), the search and each stage after it."""
        out = {name: getattr(self.rates, f"{name}_s") for name in CHEAP_STAGES}
        out |= {alias: out[name] for name, aliases in BASELINE_STAGES.items() for alias in aliases}  # the baseline's
        out |= {"reference": self.rates.fidelity_s, "feasibility": 0.0, "waiting for the baseline": 0.0}
        if self.judgments:
            out[TASKS] = self.judgment_s / self.judgments
        out |= {name: s for name, s in self.after_search().items() if name != TASKS}
        out[SEARCH] = self.search_s
        return out

    def expected_s(self, name: str) -> float | None:
        """The progress display's forecast hook (autoresearch.night.progress): a stage's seconds, or "trial"'s."""
        return self.trial_s if name == "trial" else self.stage_s().get(name)

    def text(self) -> str:
        h = _hours
        night = f"{self.bound} (about {_hours(self.hours * 3600)})" if self.bound else f"--hours {self.hours:g}"
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
            lines.append(f"  minimization: up to {h(self.minimization_s)} ({self.minimize_launches:.0f} launches: each change "
                         f"tried once), {h(self.minimization_kept_s)} kept for it ({self.minimize_kept:.0f} launches: its "
                         f"ranking round and one attempt; it takes what the deadline leaves), its gate {h(self.minimal_gate_s)}")
        if self.report_s:
            lines.append(f"  report: {h(self.report_s)}")
        lines.append(f"  total: {h(self.total_s)} of {h(self.hours * 3600)}")
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
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def plan_night(rates: Rates, *, policy: TaskPolicy, hours: float, finalists: int, finalist_launches: int,
               scope: str = "finalists", judging: bool = True, suggest: bool = True,
               baseline_first: int = 0, minimize_launches: float = 0.0, minimize_kept: float | None = None,
               report_s: float = 0.0) -> Forecast:
    """The plan; its problems name what the night cannot do, its advice what would. `baseline_first`: the
    tasks per taskset the baseline answers in its own trial (autoresearch.checks.task_tier.first_answers), before
    any judgment: only walks past them cost the baseline answers and a relaunch. `minimize_launches`: the
    minimization's launches, each change tried once (0: no minimization, and no minimal gate), `minimize_kept` the
    launches kept for it before a trial starts (default: all of them); `report_s`: one report's seconds.

    Raises:
        ValueError: an unknown scope or non-positive hours.
    """
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
                                   call_s=t.call_s))
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
    minimization_s = minimize_launches * (r.launch_s + r.bench_s)
    kept = minimize_launches if minimize_kept is None else min(minimize_kept, minimize_launches)
    kept_s = kept * (r.launch_s + r.bench_s)

    def gate_s(judged: int) -> float:  # the minimal champion: a launch, fidelity, one judgment more
        if not minimize_launches:
            return 0.0
        more = judgment_cost(judged + 1) - judgment_cost(judged)
        return r.fidelity_s + more + (0.0 if scope == "finalists" and r.tasksets else r.launch_s)

    if scope == "finalists":  # the fastest qualified finalist; another only if it fails and its judgment fits
        judged = min(finalists, 1) if r.tasksets else 0
        judgment_s = judgment_cost(judged)
        trial_s = cheap_s
        tail = kept_s + gate_s(judged) + report_s
        left = budget - baseline_s - finalists_s - judgment_s - tail
        trials = max(int(left // trial_s), 0)
    else:  # every candidate past fidelity: judged inside its trial (the baseline's answers grow with them)
        trial_s = cheap_s + judgment_cost(1)
        tail = kept_s + gate_s(1) + report_s  # the gate's judgment: about one more candidate's
        trials = max(int((budget - baseline_s - finalists_s - tail) // trial_s), 0)
        judged = trials if r.tasksets else 0
        judgment_s = judgment_cost(judged) if judged else 0.0
    plans = tasksets_for(max(judged, 1))
    problems = _taskset_problems(r, policy, plans) if judging else []
    if judging:
        fixed = baseline_s + finalists_s + (judgment_s if scope == "finalists" else 0.0) + tail
        if scope == "finalists" and fixed + cheap_s * max(finalists, 1) > budget:
            problems.append(f"the baseline, {judged} judged finalist(s), the finalists' stage" +
                            (", the minimization and its gate" if minimize_launches else "") +
                            f" take {_hours(fixed)}, leaving no time to search {max(finalists, 1)} candidate(s) in {hours:g} h")
        if scope == "every" and trials < 1:
            problems.append(f"one judged candidate takes {_hours(trial_s)}: none fits in {hours:g} h after the baseline")
    advice = _advice(rates, policy, hours, finalists, finalist_launches, scope, baseline_first) \
        if problems and suggest else ()
    basis = _walk_basis(r, design, plans) if judging and r.tasksets else ""
    return Forecast(hours=hours, scope=scope, rates=rates, baseline_s=baseline_s, trial_s=trial_s, trials=trials,
                    judgments=judged, judgment_s=judgment_s,  # smoke and guard answer every task: they cost too
                    finalists_s=finalists_s, tasksets=tuple(plans), claimed_power=policy.power,
                    problems=tuple(problems), advice=tuple(advice), judging=judging, walk_basis=basis,
                    minimize_launches=minimize_launches, minimization_s=minimization_s, minimize_kept=kept,
                    minimization_kept_s=kept_s,
                    minimal_gate_s=gate_s(judged if scope == "finalists" else 1), report_s=report_s)


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


def _advice(rates: Rates, policy: TaskPolicy, hours: float, finalists: int, launches: int, scope: str,
            baseline_first: int) -> list[str]:
    """What would make the claim: more hours, a larger budget, fewer tasks, or a weaker claim."""
    out: list[str] = []

    def fits(r: Rates = rates, p: TaskPolicy = policy, h: float = hours) -> bool:
        return plan_night(r, policy=p, hours=h, finalists=finalists, finalist_launches=launches, scope=scope,
                          suggest=False, baseline_first=baseline_first).fits

    truncating = [t for t in rates.tasksets if t.truncated_share > policy.max_truncated_share]
    if truncating:
        out.append("raise --suite-max-tokens so fewer answers hit the budget (the truncated share above assumes "
                   "the stated answer length)")
        return out
    for h in (hours * f for f in (1.5, 2, 3, 4, 6, 8, 12)):
        if fits(h=h):
            out.append(f"--hours {math.ceil(h)} (the same claim)")
            break
    else:
        out.append(f"more than {math.ceil(hours * 12)} hours for the same claim")
    for drop in (0.075, 0.10, 0.15, 0.20):
        if drop <= policy.min_drop or drop > policy.planned_discordance:
            continue
        weaker = dataclasses.replace(policy, min_drop=drop)
        if fits(p=weaker):
            out.append(f"--task-min-drop {drop:g} (a weaker claim: a {drop * 100:g}-point drop, shorter walks)")
            break
    if len(rates.tasksets) > 1:
        for t in rates.tasksets:
            rest = dataclasses.replace(rates, tasksets=tuple(x for x in rates.tasksets if x is not t))
            if fits(r=rest):
                out.append(f"--suite-tasksets {','.join(x.name for x in rest.tasksets)} (fewer tasks: "
                           f"{t.name} not judged)")
                break
    if scope == "finalists" and finalists > 1 and plan_night(
            rates, policy=policy, hours=hours, finalists=1, finalist_launches=launches, scope=scope,
            suggest=False, baseline_first=baseline_first).fits:
        out.append("--finalists 1 (one judged candidate: the fastest one)")
    return out
