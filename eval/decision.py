"""The gate's decision, as pure functions of measured records and a policy.

Tier 1, fidelity (here): each gated statistic of the candidate must stay within the noise floor
times a factor, where the floor is the baseline measured against its own reference in a fresh launch
(never below a configured minimum, because a deterministic engine's floor is exactly zero). Tier 2,
tasks (eval.task_decision, its names importable from here too): per taskset, a sequential paired test
against the baseline on the same tasks. `decide` combines the tiers, cheapest first.

Usage:
    verdict = decide_fidelity(candidate_metrics, floor_metrics, FidelityPolicy())
    tasksets = [compare_taskset(base, cand, TaskPolicy(), tasksets=len(pairs)) for base, cand in pairs]
    decision = decide(fidelity=verdict, tasksets=tasksets)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Literal

from eval.errors import EvalConfigError
from eval.records import FidelityMetrics
from eval.task_decision import (
    TaskPolicy,
    TasksetVerdict,
    baseline_problems,
    compare_taskset,
    mcnemar_one_sided_p,
    run_order,
    truncated_share,
    underpowered,
)

__all__ = [
    "Check",
    "FidelityPolicy",
    "FidelityVerdict",
    "GateDecision",
    "GatePolicy",
    "TaskPolicy",
    "TasksetVerdict",
    "baseline_problems",
    "compare_taskset",
    "decide",
    "decide_fidelity",
    "mcnemar_one_sided_p",
    "run_order",
    "truncated_share",
    "underpowered",
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
