"""Tier 2 of the gate, tasks: per taskset, the candidate is paired with the baseline on the same tasks,
and a sequential test on the tasks they disagree on (eval.sequential) decides whether it lost
accuracy. Tasksets are never merged; the suite's false-rejection rate is shared among them. Pure
functions of measured records and a policy; eval.decision combines this tier with fidelity.

Usage:
    verdict = compare_taskset(baseline, candidate, TaskPolicy(), tasksets=len(suite.tasksets))
    problems = baseline_problems(baseline, TaskPolicy(), tasksets=len(suite.tasksets))
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from eval.errors import EvalConfigError
from eval.records import TasksetResult
from eval.sequential import Outcome, SequentialDesign

__all__ = [
    "TaskPolicy",
    "TasksetVerdict",
    "baseline_problems",
    "compare_taskset",
    "mcnemar_one_sided_p",
    "run_order",
    "truncated_share",
    "underpowered",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskPolicy:
    """Tier 2: per taskset, a sequential paired test on the tasks the two runs disagree on.

    Partial credit is a wrong answer: an episode counts as correct only at `full_credit` (reasoning-gym
    gives 0.65 for a knights-and-knaves answer with one role wrong; math-verify gives 0 or 1). The
    false-rejection rate `alpha` is for the whole suite: each of k tasksets is tested at alpha / k.
    `judge=False` is the smoke mode: the suite runs and everything is recorded, but nothing is judged
    and every report says so (the embedded default's random model, whose answers are all wrong).
    """

    min_drop: float = 0.05  # accuracy points (as a fraction) each taskset must detect
    alpha: float = 0.05  # false rejections of a lossless change, at most, over the whole suite
    power: float = 0.80  # at min_drop, when planned_discordance of the tasks flip either way
    planned_discordance: float = 0.10
    futility: float = 0.02  # eval.sequential: stop accepting once a min_drop loss is this implausible
    full_credit: float = 1.0  # an ok episode is correct only with at least this reward
    max_candidate_failures: int = 0  # operational failures tolerated in the candidate (fail closed)
    max_truncated_share: float = 0.5  # more truncated episodes than this: the budget does not let the model finish
    judge: bool = True

    def __post_init__(self) -> None:
        if self.max_candidate_failures < 0:
            raise EvalConfigError(f"max_candidate_failures must be >= 0, got {self.max_candidate_failures}")
        if not 0.0 < self.full_credit <= 1.0:
            raise EvalConfigError(f"full_credit must be in (0, 1], got {self.full_credit}")
        if not 0.0 <= self.max_truncated_share < 1.0:
            raise EvalConfigError(f"max_truncated_share must be in [0, 1), got {self.max_truncated_share}")
        self.design(1)  # validates the test's parameters

    def design(self, tasksets: int) -> SequentialDesign:
        """The test each of `tasksets` tasksets runs (Bonferroni: alpha / tasksets each)."""
        return SequentialDesign(min_drop=self.min_drop, alpha=self.alpha / max(tasksets, 1), power=self.power,
                                planned_discordance=self.planned_discordance, futility=self.futility)


@dataclass(frozen=True, kw_only=True, slots=True)
class TasksetVerdict:
    """One taskset's paired test: `lost` tasks correct in the baseline only, `gained` in the candidate only.

    Counts are over the tasks the test consumed (`tasks_used` of `paired_tasks`, in the baseline's run
    order): the test stops as soon as its answer is clear.
    """

    name: str
    paired_tasks: int
    tasks_used: int
    lost: int
    gained: int
    baseline_correct: int
    candidate_correct: int
    candidate_failures: int
    baseline_failures: int
    candidate_truncations: int
    baseline_truncations: int
    unpaired_tasks: tuple[str, ...]  # task keys left out because a baseline episode failed
    decision: str  # rejected | accepted | accepted at the end | incomplete | not judged (smoke)
    alpha: float  # this taskset's share of the suite's false-rejection rate
    power: float  # exact, against a min_drop loss at the planned discordance, on the tasks the walk could use
    observed_discordance: float | None  # (lost + gained) / tasks_used
    observed_power: float | None  # the same power at the observed discordance
    mcnemar_p: float  # one-sided exact McNemar p-value for "the candidate loses"; evidence only
    passed: bool
    reasons: tuple[str, ...]


def mcnemar_one_sided_p(lost: int, gained: int) -> float:
    """P(at least `lost` of the lost+gained discordant pairs go against the candidate | no difference)."""
    n = lost + gained
    if n == 0:
        return 1.0
    return sum(math.comb(n, i) for i in range(lost, n + 1)) / 2**n


def run_order(result: TasksetResult) -> list[str]:
    """Task keys in the order the run dispatched them (first trace start), else by task index and key."""
    first: dict[str, tuple] = {}
    for e in result.episodes:
        rank = (e.started_at if e.started_at is not None else float("inf"),
                e.task_idx if e.task_idx is not None else -1, e.task_key)
        first[e.task_key] = min(first.get(e.task_key, rank), rank)
    return sorted(first, key=first.__getitem__)


def _scores(result: TasksetResult, full_credit: float) -> tuple[dict[str, float], set[str]]:
    """Per task key: the share of its ok episodes at full credit; and the keys with a failed episode."""
    correct: dict[str, list[bool]] = defaultdict(list)
    failed: set[str] = set()
    for episode in result.episodes:
        correct.setdefault(episode.task_key, [])
        if not episode.ok:
            failed.add(episode.task_key)
        else:
            correct[episode.task_key].append(episode.correct(full_credit))
    return {k: (sum(v) / len(v) if v else 0.0) for k, v in correct.items()}, failed


def truncated_share(result: TasksetResult) -> float:
    return result.truncations / result.rollouts if result.rollouts else 0.0


def baseline_problems(result: TasksetResult, policy: TaskPolicy, tasksets: int,
                      planned_tasks: int | None = None) -> list[str]:
    """Why a baseline run cannot serve as the task tier's reference; empty when it can.

    The baseline is the yardstick: failed episodes, truncation-dominated answers, or too few tasks
    for the design's power all make every later verdict meaningless. A baseline that answers lazily
    (a prefix of its taskset) is sized by `planned_tasks`, the taskset its walks may still use.
    """
    problems = []
    if result.failures:
        errors = sorted({e.error or "?" for e in result.episodes if not e.ok})
        problems.append(f"{result.name}: {result.failures} of {result.rollouts} baseline episodes failed "
                        f"operationally (e.g. {errors[0][:200]})")
    if truncated_share(result) > policy.max_truncated_share:
        problems.append(f"{result.name}: {result.truncations} of {result.rollouts} baseline answers hit the "
                        f"{result.max_tokens}-token budget (more than {policy.max_truncated_share:.0%}): raise "
                        "--suite-max-tokens so the model can finish")
    if problem := underpowered(result.name, planned_tasks or result.tasks, policy, policy.design(tasksets)):
        problems.append(problem)
    return problems


def underpowered(name: str, tasks: int, policy: TaskPolicy, design: SequentialDesign) -> str | None:
    """Why `tasks` paired tasks cannot make the claim the gate makes, with how many it needs; None if they can.

    The one size check: the plan, the baseline's run and every verdict ask it.
    """
    power = design.power_at(tasks) if tasks else 0.0
    if power >= policy.power:
        return None
    limit = max(4 * tasks, 2000)
    needed = design.tasks_needed(max_tasks=limit)
    return (f"{name}: {tasks} tasks detect a {policy.min_drop:.0%} accuracy drop with power {power:.0%} "
            f"(alpha {design.alpha:.3g}, {policy.planned_discordance:.0%} of tasks flipping), below the "
            f"{policy.power:.0%} the gate claims; it needs "
            + (f"{needed} tasks" if needed else f"more than {limit} tasks")
            + " (or run the task tier as a smoke check: --task-tier smoke, which judges nothing)")


def compare_taskset(
    baseline: TasksetResult, candidate: TasksetResult, policy: TaskPolicy, *, tasksets: int = 1,
    planned_tasks: int | None = None, observed_power: bool = True,
) -> TasksetVerdict:
    """Tier 2 for one taskset of a suite of `tasksets`: the sequential paired test (eval.sequential).

    `planned_tasks`: the taskset's size where the baseline answered only a prefix of it (lazily, as far
    as the walks needed): the power is the test's on the whole taskset, and a walk still undecided at
    the end of the prefix is incomplete, not accepted. `observed_power=False` leaves out the power at the
    observed discordance (an exact computation per new discordance): stop rules need only the decision.

    The test walks the paired tasks in the baseline's run order; a candidate run that was stopped
    early by the same test (eval.runner) ends exactly where the walk decides. A task is lost when the
    candidate's share of correct rollouts is below the baseline's, gained when above.

    Raises:
        EvalConfigError: the two runs are not comparable (other taskset, budget or task selection).
    """
    if baseline.name != candidate.name or baseline.taskset_id != candidate.taskset_id:
        raise EvalConfigError(f"cannot pair taskset {candidate.name!r} with baseline {baseline.name!r}")
    if baseline.max_tokens != candidate.max_tokens:
        raise EvalConfigError(
            f"{candidate.name}: max_tokens {candidate.max_tokens} differs from the baseline's "
            f"{baseline.max_tokens}; runs under different output limits are not comparable"
        )
    base_score, base_failed = _scores(baseline, policy.full_credit)
    cand_score, cand_failed = _scores(candidate, policy.full_credit)
    if extra := sorted(set(cand_score) - set(base_score)):
        raise EvalConfigError(
            f"{candidate.name}: the candidate ran tasks the baseline did not ({len(extra)} keys, e.g. "
            f"{extra[:3]}); pairing needs the same selection, sampling and budget"
        )
    design = policy.design(tasksets)
    order = [key for key in run_order(baseline) if key not in base_failed]
    outcomes: list[Outcome] = []
    for key in order:
        if key not in cand_score:
            break  # the candidate's run ended here (stopped by the test, or cut short)
        if key in cand_failed and not cand_score.get(key):
            outcomes.append("tie")  # an operational failure is not an answer; it is counted below
            continue
        diff = base_score[key] - cand_score[key]
        outcomes.append("lost" if diff > 0 else "gained" if diff < 0 else "tie")
    walk = design.walk(outcomes)
    used = order[: walk.tasks_used]
    failures = sum(not e.ok for e in candidate.episodes)
    reasons: list[str] = []
    decision = walk.decision
    if not policy.judge:
        decision = "not judged (smoke)"
    else:
        if failures > policy.max_candidate_failures:
            reasons.append(f"{candidate.name}: {failures} operational failures (timeouts, transport or harness "
                           f"errors) in the candidate run, {policy.max_candidate_failures} tolerated")
        if truncated_share(candidate) > policy.max_truncated_share:
            reasons.append(f"{candidate.name}: {candidate.truncations} of {candidate.rollouts} candidate answers "
                           f"hit the {candidate.max_tokens}-token budget")
        if walk.decision == "rejected":
            reasons.append(f"{candidate.name}: lost {walk.lost}, gained {walk.gained} in the first {walk.tasks_used} "
                           f"paired tasks: a {policy.min_drop:.0%} accuracy drop is likelier than none "
                           f"(sequential test, alpha {design.alpha:.3g})")
        elif walk.decision == "undecided":
            if len(outcomes) < len(order) or (planned_tasks or 0) > len(order):
                decision = "incomplete"
                reasons.append(f"{candidate.name}: the candidate's run ended after {len(outcomes)} of "
                               f"{max(len(order), planned_tasks or 0)} paired tasks without a decision")
            else:
                decision = "accepted at the end"
    sized = max(len(order), planned_tasks or 0)  # the tasks the walk could use
    power = design.power_at(sized) if sized else 0.0
    if policy.judge and (problem := underpowered(candidate.name, sized, policy, design)):
        reasons.append(problem)
    discordance = (walk.lost + walk.gained) / walk.tasks_used if walk.tasks_used else None
    return TasksetVerdict(
        name=candidate.name,
        paired_tasks=len(order),
        tasks_used=walk.tasks_used,
        lost=walk.lost,
        gained=walk.gained,
        baseline_correct=round(sum(base_score[k] for k in used)),
        candidate_correct=round(sum(cand_score.get(k, 0.0) for k in used)),
        candidate_failures=failures,
        baseline_failures=sum(not e.ok for e in baseline.episodes),
        candidate_truncations=candidate.truncations,
        baseline_truncations=baseline.truncations,
        unpaired_tasks=tuple(sorted(base_failed)),
        decision=decision,
        alpha=design.alpha,
        power=power,
        observed_discordance=discordance,
        observed_power=design.power_at(sized, discordance)
        if observed_power and sized and discordance is not None else None,
        mcnemar_p=mcnemar_one_sided_p(walk.lost, walk.gained),
        passed=not reasons,
        reasons=tuple(reasons),
    )
