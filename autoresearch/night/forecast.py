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

from autoresearch.night.forecast_record import MINIMIZE_SHARE, Forecast, TasksetPlan, hours_text
from autoresearch.night.rates import UNKNOWN_TASKS, Rates
from eval.decision import TaskPolicy
from eval.sequential import SequentialDesign
from eval.walks import longest_walk_past, lookahead, quiet_walk, walk_survival

__all__ = ["MINIMIZE_SHARE", "SCOPES", "Forecast", "baseline_relaunches", "plan_night"]

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
                        f" take {hours_text(fixed)}, leaving no time to search {max(finalists, 1)} candidate(s) in {hours:g} h")
    if judging and scope == "every" and trials < 1:
        problems.append(f"one judged candidate takes {hours_text(trial_s)}: none fits in {hours:g} h after the baseline")
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
