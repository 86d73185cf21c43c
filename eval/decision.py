"""The gate's decision, as pure functions of measured records and a policy.

Tier 1, fidelity: each gated statistic of the candidate must stay within the noise floor times a
factor, where the floor is the baseline measured against its own reference in a fresh launch (never
below a configured minimum, because a deterministic engine's floor is exactly zero). Tier 2, tasks:
per taskset, the candidate is paired with the baseline on the same tasks and fails when the correct
answers it lost outnumber those it gained by more than a margin. Tasksets are never merged.

Usage:
    verdict = decide_fidelity(candidate_metrics, floor_metrics, FidelityPolicy())
    tasksets = [compare_taskset(base, cand, TaskPolicy()) for base, cand in pairs]
    decision = decide(fidelity=verdict, tasksets=tasksets)
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Literal

from eval.errors import EvalConfigError
from eval.records import FidelityMetrics, TasksetResult

__all__ = [
    "Check",
    "FidelityPolicy",
    "FidelityVerdict",
    "GateDecision",
    "GatePolicy",
    "TaskPolicy",
    "TasksetVerdict",
    "compare_taskset",
    "decide",
    "decide_fidelity",
    "mcnemar_one_sided_p",
    "worst_case_floor",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class FidelityPolicy:
    """Limits are `noise_factor * max(measured floor, min_floor_*)` for each gated statistic."""

    noise_factor: float = 3.0
    min_floor_kl_mean: float = 1e-4  # nats; the floor assumed when the measured one is smaller
    min_floor_kl_p99: float = 1e-3
    min_floor_top1_disagreement: float = 2e-3  # fraction of positions; near-tie flips are not counted

    def __post_init__(self) -> None:
        if not (math.isfinite(self.noise_factor) and self.noise_factor >= 1.0):
            raise EvalConfigError(f"noise_factor must be a finite number >= 1, got {self.noise_factor}")
        for f in fields(self):
            if f.name.startswith("min_floor_") and not getattr(self, f.name) >= 0.0:
                raise EvalConfigError(f"{f.name} must be >= 0, got {getattr(self, f.name)}")


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskPolicy:
    """Paired comparison of one taskset with the baseline on the same tasks."""

    margin: int = 1  # fail when lost - gained > margin
    max_lost: int | None = None  # also fail when lost >= max_lost, whatever was gained
    correct_threshold: float = 0.5  # an ok episode with reward >= this counts as correct
    max_candidate_failures: int = 0  # ok=false episodes tolerated in the candidate (fail closed)

    def __post_init__(self) -> None:
        if self.margin < 0:
            raise EvalConfigError(f"margin must be >= 0, got {self.margin}")
        if self.max_lost is not None and self.max_lost < 1:
            raise EvalConfigError(f"max_lost must be >= 1 or None, got {self.max_lost}")
        if self.max_candidate_failures < 0:
            raise EvalConfigError(f"max_candidate_failures must be >= 0, got {self.max_candidate_failures}")


@dataclass(frozen=True, kw_only=True, slots=True)
class GatePolicy:
    fidelity: FidelityPolicy = FidelityPolicy()
    tasks: TaskPolicy = TaskPolicy()


@dataclass(frozen=True, kw_only=True, slots=True)
class Check:
    """One gated statistic: the candidate's value, the floor it was measured against, and the limit."""

    name: str
    value: float
    floor: float
    limit: float
    passed: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class FidelityVerdict:
    passed: bool
    checks: tuple[Check, ...]

    @property
    def reasons(self) -> tuple[str, ...]:
        return tuple(
            f"fidelity: {c.name} {c.value:.3g} exceeds {c.limit:.3g} (floor {c.floor:.3g})"
            for c in self.checks
            if not c.passed
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class TasksetVerdict:
    """Flips of one taskset: `lost` (b) correct in the baseline only, `gained` (c) in the candidate only."""

    name: str
    paired_tasks: int
    lost: int
    gained: int
    baseline_correct: int
    candidate_correct: int
    candidate_failures: int
    baseline_failures: int
    candidate_truncations: int
    baseline_truncations: int
    unpaired_tasks: tuple[str, ...]  # task keys left out because a baseline episode failed
    mcnemar_p: float  # one-sided exact McNemar p-value for "the candidate loses"; evidence only
    passed: bool
    reasons: tuple[str, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class GateDecision:
    passed: bool
    failed_stage: Literal["fidelity", "tasks"] | None
    reasons: tuple[str, ...]
    fidelity: FidelityVerdict | None
    tasksets: tuple[TasksetVerdict, ...]


def worst_case_floor(floors: Sequence[FidelityMetrics]) -> FidelityMetrics:
    """One noise floor from several fresh baseline launches: the worst of each statistic.

    Raises:
        EvalConfigError: no floors, or floors measured against different references.
    """
    if not floors:
        raise EvalConfigError("no noise-floor measurement: measure the baseline in a fresh launch first")
    if len({f.n_positions for f in floors}) != 1:
        raise EvalConfigError("noise floors were measured against different references")
    worst = max(floors, key=lambda f: f.kl_mean)
    return dataclasses.replace(
        worst,
        kl_mean=max(f.kl_mean for f in floors),
        kl_p99=max(f.kl_p99 for f in floors),
        kl_max=max(f.kl_max for f in floors),
        top1_agreement=min(f.top1_agreement for f in floors),
        top1_decisive_agreement=min(f.top1_gated_agreement for f in floors),
        greedy_match_fraction=min(f.greedy_match_fraction for f in floors),
        greedy_full_matches=min(f.greedy_full_matches for f in floors),
    )


def _check(name: str, value: float, floor: float, min_floor: float, factor: float) -> Check:
    limit = factor * max(floor, min_floor)
    return Check(name=name, value=value, floor=floor, limit=limit, passed=value <= limit)


def decide_fidelity(
    candidate: FidelityMetrics, floor: FidelityMetrics, policy: FidelityPolicy
) -> FidelityVerdict:
    """Tier 1: every gated statistic within the noise floor times the factor."""
    if candidate.n_positions != floor.n_positions:
        raise EvalConfigError(
            f"candidate scored {candidate.n_positions} positions but the noise floor {floor.n_positions}: "
            "they were not measured against the same reference"
        )
    k = policy.noise_factor
    checks = (
        _check("kl_mean", candidate.kl_mean, floor.kl_mean, policy.min_floor_kl_mean, k),
        _check("kl_p99", candidate.kl_p99, floor.kl_p99, policy.min_floor_kl_p99, k),
        _check(
            "top1_disagreement",
            candidate.top1_decisive_disagreement,
            floor.top1_decisive_disagreement,
            policy.min_floor_top1_disagreement,
            k,
        ),
    )
    return FidelityVerdict(passed=all(c.passed for c in checks), checks=checks)


def mcnemar_one_sided_p(lost: int, gained: int) -> float:
    """P(at least `lost` of the lost+gained discordant pairs go against the candidate | no difference)."""
    n = lost + gained
    if n == 0:
        return 1.0
    return sum(math.comb(n, i) for i in range(lost, n + 1)) / 2**n


def _correct_by_task(result: TasksetResult, threshold: float) -> tuple[dict[str, int], set[str]]:
    """Per task key: correct ok-episodes; and the keys with any failed (ok=false) episode."""
    correct: dict[str, int] = defaultdict(int)
    failed: set[str] = set()
    for episode in result.episodes:
        correct.setdefault(episode.task_key, 0)
        if not episode.ok:
            failed.add(episode.task_key)
        elif episode.reward is not None and episode.reward >= threshold:
            correct[episode.task_key] += 1
    return dict(correct), failed


def compare_taskset(baseline: TasksetResult, candidate: TasksetResult, policy: TaskPolicy) -> TasksetVerdict:
    """Tier 2 for one taskset: paired flips on the same tasks.

    With r rollouts per task the unit is still the task: lost += max(0, base_correct - cand_correct)
    and gained += max(0, cand_correct - base_correct), which is the usual b/c when r = 1.

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
    base_correct, base_failed = _correct_by_task(baseline, policy.correct_threshold)
    cand_correct, cand_failed = _correct_by_task(candidate, policy.correct_threshold)
    if set(base_correct) != set(cand_correct):
        missing = sorted(set(base_correct) ^ set(cand_correct))
        raise EvalConfigError(
            f"{candidate.name}: the runs selected different tasks ({len(missing)} keys differ, "
            f"e.g. {missing[:3]}); pairing needs the same selection, sampling and budget"
        )
    unpaired = tuple(sorted(base_failed))
    lost = gained = 0
    paired = [key for key in base_correct if key not in base_failed]
    for key in paired:
        diff = base_correct[key] - cand_correct[key]
        lost += max(diff, 0)
        gained += max(-diff, 0)
    reasons: list[str] = []
    failures = sum(not e.ok for e in candidate.episodes)
    if failures > policy.max_candidate_failures:
        reasons.append(
            f"{candidate.name}: {failures} operational failures (ok=false) in the candidate run, "
            f"{policy.max_candidate_failures} tolerated"
        )
    if lost - gained > policy.margin:
        reasons.append(
            f"{candidate.name}: lost {lost}, gained {gained}; lost - gained > margin {policy.margin}"
        )
    if policy.max_lost is not None and lost >= policy.max_lost:
        reasons.append(f"{candidate.name}: lost {lost} >= max_lost {policy.max_lost}")
    return TasksetVerdict(
        name=candidate.name,
        paired_tasks=len(paired),
        lost=lost,
        gained=gained,
        baseline_correct=sum(base_correct[k] for k in paired),
        candidate_correct=sum(cand_correct[k] for k in paired),
        candidate_failures=failures,
        baseline_failures=sum(not e.ok for e in baseline.episodes),
        candidate_truncations=candidate.truncations,
        baseline_truncations=baseline.truncations,
        unpaired_tasks=unpaired,
        mcnemar_p=mcnemar_one_sided_p(lost, gained),
        passed=not reasons,
        reasons=tuple(reasons),
    )


def decide(
    *, fidelity: FidelityVerdict | None = None, tasksets: Sequence[TasksetVerdict] = ()
) -> GateDecision:
    """Combine the tiers, cheapest first: a fidelity failure decides without the tasks.

    Raises:
        EvalConfigError: there is no evidence at all.
    """
    if fidelity is None and not tasksets:
        raise EvalConfigError("a gate decision needs a fidelity verdict, taskset verdicts, or both")
    if fidelity is not None and not fidelity.passed:
        return GateDecision(
            passed=False,
            failed_stage="fidelity",
            reasons=fidelity.reasons,
            fidelity=fidelity,
            tasksets=tuple(tasksets),
        )
    task_reasons = tuple(reason for verdict in tasksets for reason in verdict.reasons)
    return GateDecision(
        passed=not task_reasons,
        failed_stage="tasks" if task_reasons else None,
        reasons=task_reasons,
        fidelity=fidelity,
        tasksets=tuple(tasksets),
    )
