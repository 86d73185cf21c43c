"""Tier 2 of the gate, tasks: per taskset, the candidate is paired with the baseline on the same tasks,
and a test on the tasks they disagree on decides whether it lost accuracy: in `judge` mode the
sequential test (eval.sequential), sized for the claim "nothing lost"; in `guard` mode the exact sign
test (eval.guard), which claims only "no loss detected" and states the drop it can see; in `smoke`
mode nothing. Tasksets are never merged; the suite's false-rejection rate is shared among them. Pure
functions of measured records and a policy; eval.decision combines this tier with fidelity.

Usage:
    verdict = compare_taskset(baseline, candidate, TaskPolicy(), tasksets=len(suite.tasksets))
    problems = baseline_problems(baseline, TaskPolicy(), tasksets=len(suite.tasksets))
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Literal

from eval.errors import EvalConfigError
from eval.guard import SignGuard, sign_test_p
from eval.records import TasksetResult
from eval.sequential import Outcome, SequentialDesign

__all__ = [
    "TASK_TIER_MODES",
    "TaskPolicy",
    "TasksetVerdict",
    "baseline_problems",
    "compare_taskset",
    "mcnemar_one_sided_p",
    "run_order",
    "truncated_share",
    "underpowered",
]


TaskTierMode = Literal["judge", "guard", "smoke"]
TASK_TIER_MODES: tuple[str, ...] = ("judge", "guard", "smoke")


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskPolicy:
    """Tier 2: per taskset, a paired test on the tasks the two runs disagree on, as `mode` says.

    - `judge`: the sequential test, sized to detect `min_drop` with `power`; a taskset too small for
      that claim is refused before anything runs.
    - `guard`: the exact sign test at the taskset's share of `alpha`, on every paired task; it rejects
      only losses its tasks can show, states the drop it catches with `power`, and a pass means "no
      loss detected", never "accepted" (broad's default: 3-10 tasks per taskset).
    - `smoke`: the suite runs and everything is recorded, but nothing is judged and every report says
      so (the embedded default's random model, whose answers are all wrong).

    Partial credit is a wrong answer: an episode counts as correct only at `full_credit` (reasoning-gym
    gives 0.65 for a knights-and-knaves answer with one role wrong; math-verify gives 0 or 1). The
    false-rejection rate `alpha` is for the whole suite: each of k tasksets is tested at alpha / k.
    """

    min_drop: float = 0.05  # accuracy points (as a fraction) each taskset must detect
    alpha: float = 0.05  # false rejections of a lossless change, at most, over the whole suite
    power: float = 0.80  # at min_drop, when planned_discordance of the tasks flip either way
    planned_discordance: float = 0.10
    futility: float = 0.02  # eval.sequential: stop accepting once a min_drop loss is this implausible
    full_credit: float = 1.0  # an ok episode is correct only with at least this reward
    max_candidate_failures: int = 0  # operational failures tolerated in the candidate (fail closed)
    max_truncated_share: float = 0.5  # more truncated episodes than this: the budget does not let the model finish
    mode: TaskTierMode = "judge"

    def __post_init__(self) -> None:
        if self.mode not in TASK_TIER_MODES:
            raise EvalConfigError(f"task tier mode must be one of {', '.join(TASK_TIER_MODES)}, got {self.mode!r}")
        if self.max_candidate_failures < 0:
            raise EvalConfigError(f"max_candidate_failures must be >= 0, got {self.max_candidate_failures}")
        if not 0.0 < self.full_credit <= 1.0:
            raise EvalConfigError(f"full_credit must be in (0, 1], got {self.full_credit}")
        if not 0.0 <= self.max_truncated_share < 1.0:
            raise EvalConfigError(f"max_truncated_share must be in [0, 1), got {self.max_truncated_share}")
        self.design(1)  # validates the test's parameters

    @property
    def judge(self) -> bool:
        """The sequential test judges (it may stop a candidate's run early and refuses small tasksets)."""
        return self.mode == "judge"

    @property
    def decides(self) -> bool:
        """Any test decides (judge or guard): the baseline must then be a usable reference."""
        return self.mode != "smoke"

    def guard(self, tasks: int, tasksets: int) -> SignGuard:
        """The sign test one of `tasksets` tasksets runs on `tasks` paired tasks (Bonferroni: alpha / tasksets)."""
        return SignGuard(n_tasks=tasks, alpha=self.alpha / max(tasksets, 1))

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
    #                guard: loss detected | no loss detected | incomplete
    alpha: float  # this taskset's share of the suite's false-rejection rate
    power: float  # exact, against a min_drop loss at the planned discordance, on the tasks the walk could use
    observed_discordance: float | None  # (lost + gained) / tasks_used
    observed_power: float | None  # the same power at the observed discordance
    mcnemar_p: float  # one-sided exact McNemar p-value for "the candidate loses"; evidence only
    passed: bool
    reasons: tuple[str, ...]
    mode: str = "judge"
    # guard: the accuracy drop the sign test catches with the policy's power on paired_tasks tasks, with no
    # other flips and with the planned share flipping either way besides (None: no drop is caught)
    detectable_drop: float | None = None
    detectable_drop_at_flips: float | None = None


mcnemar_one_sided_p = sign_test_p  # the exact one-sided test, named for the paired design it serves


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

    The baseline is the yardstick: failed episodes, truncation-dominated answers, or (judge mode) too
    few tasks for the design's power all make every later verdict meaningless. A baseline that answers
    lazily (a prefix of its taskset) is sized by `planned_tasks`, the taskset its walks may still use.
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
    if policy.judge and (problem := underpowered(result.name, planned_tasks or result.tasks, policy,
                                                  policy.design(tasksets))):
        problems.append(problem)  # the guard claims only what its tasks can show, and says how much
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
    """Tier 2 for one taskset of a suite of `tasksets`: the sequential paired test (eval.sequential), or in
    guard mode the exact sign test on every paired task (eval.guard).

    `planned_tasks`: the taskset's size where the baseline answered only a prefix of it (lazily, as far
    as the walks needed): the power is the test's on the whole taskset, and a walk still undecided at
    the end of the prefix is incomplete, not accepted. `observed_power=False` leaves out the power at the
    observed discordance (an exact computation per new discordance): stop rules need only the decision.

    The sequential test walks the paired tasks in the baseline's run order; a candidate run that was stopped
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
    order = [key for key in run_order(baseline) if key not in base_failed]
    outcomes = _outcomes(order, base_score, cand_score, cand_failed)
    if policy.mode == "guard":
        return _guard_verdict(baseline, candidate, policy, tasksets, order, outcomes, base_score, cand_score,
                              base_failed)
    design = policy.design(tasksets)
    walk = design.walk(outcomes)
    used = order[: walk.tasks_used]
    failures = sum(not e.ok for e in candidate.episodes)
    reasons: list[str] = []
    decision = walk.decision
    if not policy.judge:
        decision = "not judged (smoke)"
    else:
        reasons += _operational_reasons(candidate, policy)
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
        mode=policy.mode,
    )


def _outcomes(order: list[str], base_score: dict[str, float], cand_score: dict[str, float],
              cand_failed: set[str]) -> list[Outcome]:
    """Each paired task's outcome in the baseline's run order, up to where the candidate's run ended."""
    outcomes: list[Outcome] = []
    for key in order:
        if key not in cand_score:
            break  # the candidate's run ended here (stopped by the test, or cut short)
        if key in cand_failed and not cand_score.get(key):
            outcomes.append("tie")  # an operational failure is not an answer; it is counted below
            continue
        diff = base_score[key] - cand_score[key]
        outcomes.append("lost" if diff > 0 else "gained" if diff < 0 else "tie")
    return outcomes


def _operational_reasons(candidate: TasksetResult, policy: TaskPolicy) -> list[str]:
    """Fail closed: a candidate that could not answer, or ran out of budget, is not judged lossless."""
    reasons = []
    failures = sum(not e.ok for e in candidate.episodes)
    if failures > policy.max_candidate_failures:
        reasons.append(f"{candidate.name}: {failures} operational failures (timeouts, transport or harness "
                       f"errors) in the candidate run, {policy.max_candidate_failures} tolerated")
    if truncated_share(candidate) > policy.max_truncated_share:
        reasons.append(f"{candidate.name}: {candidate.truncations} of {candidate.rollouts} candidate answers "
                       f"hit the {candidate.max_tokens}-token budget")
    return reasons


def _guard_verdict(baseline: TasksetResult, candidate: TasksetResult, policy: TaskPolicy, tasksets: int,
                   order: list[str], outcomes: list[Outcome], base_score: dict[str, float],
                   cand_score: dict[str, float], base_failed: set[str]) -> TasksetVerdict:
    """The guard: the exact sign test on every paired task's discordant pairs, and the drop it can see."""
    guard = policy.guard(len(order), tasksets)
    lost, gained = outcomes.count("lost"), outcomes.count("gained")
    p_value = sign_test_p(lost, gained)
    reasons = _operational_reasons(candidate, policy)
    if len(outcomes) < len(order):
        decision = "incomplete"
        reasons.append(f"{candidate.name}: the candidate's run ended after {len(outcomes)} of {len(order)} "
                       "paired tasks")
    elif guard.rejects(lost, gained):
        decision = "loss detected"
        reasons.append(f"{candidate.name}: lost {lost}, gained {gained} of {len(order)} paired tasks: exact sign "
                       f"test p = {p_value:.3g} <= {guard.alpha:.3g} (the guard's share of the suite's "
                       f"{policy.alpha:.0%})")
    else:
        decision = "no loss detected"
    used = order[: len(outcomes)]
    discordance = (lost + gained) / len(outcomes) if outcomes else None
    return TasksetVerdict(
        name=candidate.name,
        paired_tasks=len(order),
        tasks_used=len(outcomes),
        lost=lost,
        gained=gained,
        baseline_correct=round(sum(base_score[k] for k in used)),
        candidate_correct=round(sum(cand_score.get(k, 0.0) for k in used)),
        candidate_failures=sum(not e.ok for e in candidate.episodes),
        baseline_failures=sum(not e.ok for e in baseline.episodes),
        candidate_truncations=candidate.truncations,
        baseline_truncations=baseline.truncations,
        unpaired_tasks=tuple(sorted(base_failed)),
        decision=decision,
        alpha=guard.alpha,
        power=guard.power(policy.min_drop, policy.planned_discordance) if order else 0.0,
        observed_discordance=discordance,
        observed_power=None,
        mcnemar_p=p_value,
        passed=not reasons,
        reasons=tuple(reasons),
        mode="guard",
        detectable_drop=guard.detectable_drop(power=policy.power),
        detectable_drop_at_flips=guard.detectable_drop(power=policy.power, flips=policy.planned_discordance),
    )
