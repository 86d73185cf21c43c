"""The task tier's guard: the exact sign test's decision on constructed paired runs, and the power it states."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest

from eval.decision import TaskPolicy, baseline_problems, compare_taskset
from eval.guard import SignGuard, sign_test_p, state_guard
from tests.eval.test_decision import _result

GUARD = TaskPolicy(mode="guard")


def _paired(n: int, lost: int = 0, gained: int = 0, name: str = "mmlu-pro"):
    """A baseline right on the first half of `n` tasks; the candidate loses the first `lost` of those and
    gains the first `gained` of the others."""
    base, cand = {}, {}
    half = n // 2
    for i in range(n):
        right = i < half
        base[f"t{i:03d}"] = [1.0 if right else 0.0]
        flipped = (right and i < lost) or (not right and i - half < gained)
        cand[f"t{i:03d}"] = [float(right != flipped)]
    return _result(base, name=name), _result(cand, name=name)


def _brute_force_power(n: int, alpha: float, drop: float, flips: float) -> float:
    """Every one of the 3**n task-by-task outcomes, weighted: an independent check of SignGuard.power."""
    p = {"lost": flips / 2 + drop, "gained": flips / 2, "tie": 1 - flips - drop}
    total = 0.0
    for outcome in itertools.product(p, repeat=n):
        lost, gained = outcome.count("lost"), outcome.count("gained")
        if sign_test_p(lost, gained) <= alpha:
            total += math.prod(p[o] for o in outcome)
    return total


def test_a_lossless_candidate_with_no_flips_passes_as_no_loss_detected():
    base, cand = _paired(10)
    verdict = compare_taskset(base, cand, GUARD, tasksets=1)
    assert verdict.passed and verdict.decision == "no loss detected"
    assert (verdict.lost, verdict.gained, verdict.tasks_used, verdict.paired_tasks) == (0, 0, 10, 10)
    assert verdict.mcnemar_p == 1.0 and verdict.mode == "guard"


def test_a_candidate_losing_every_discordant_pair_fails_when_its_tasks_can_show_it():
    base, cand = _paired(10, lost=5)  # 5 of 5 discordant pairs lost: p = 1/32 <= 0.05
    verdict = compare_taskset(base, cand, GUARD, tasksets=1)
    assert not verdict.passed and verdict.decision == "loss detected"
    assert verdict.mcnemar_p == pytest.approx(1 / 32)
    assert "lost 5, gained 0 of 10 paired tasks: exact sign test p = 0.0312 <= 0.05" in verdict.reasons[0]
    # the same losses with one gain are p = 7/64 > 0.05: no loss detected, and the guard says nothing more
    base, mixed = _paired(10, lost=5, gained=1)
    assert compare_taskset(base, mixed, GUARD, tasksets=1).decision == "no loss detected"


def test_the_suite_alpha_is_shared_among_tasksets_so_three_tasks_can_never_reject():
    base, cand = _paired(6, lost=3, name="aime25")  # every right answer lost
    verdict = compare_taskset(base, cand, GUARD, tasksets=4)
    assert verdict.alpha == pytest.approx(0.0125)
    assert verdict.passed and verdict.decision == "no loss detected"  # p = 1/8: these tasks cannot show it
    statement = state_guard("aime25", GUARD.guard(3, 4), power=0.8, flips=0.1)
    assert statement.min_losses is None and statement.drop is None and statement.smallest_p == 0.125


def test_the_guard_still_fails_a_candidate_on_operational_failures_and_truncation():
    base, cand = _paired(10)
    failed = dataclasses.replace(cand.episodes[0], ok=False, reward=None, error="timeout")
    cand = dataclasses.replace(cand, episodes=(failed, *cand.episodes[1:]), failures=1)
    verdict = compare_taskset(base, cand, GUARD, tasksets=1)
    assert not verdict.passed and "operational failures" in verdict.reasons[0]


@pytest.mark.parametrize(("n", "alpha", "drop", "flips"), [(6, 0.05, 0.5, 0.0), (6, 0.05, 0.3, 0.2),
                                                            (7, 0.0125, 0.8, 0.1), (5, 0.05, 0.9, 0.1)])
def test_the_stated_power_is_the_exact_enumeration(n, alpha, drop, flips):
    assert SignGuard(n_tasks=n, alpha=alpha).power(drop, flips) == pytest.approx(
        _brute_force_power(n, alpha, drop, flips), abs=1e-12)


def test_the_detectable_drop_is_the_smallest_one_caught_with_the_stated_power():
    guard = SignGuard(n_tasks=10, alpha=0.05)
    for flips in (0.0, 0.1):
        drop = guard.detectable_drop(power=0.8, flips=flips)
        assert guard.power(drop, flips) >= 0.8 > guard.power(drop - 0.001, flips)
    # broad's MMLU-Pro (10 tasks) alone at 5%: 5 clean losses reject; a 58.1-point drop at 80% with no flips
    assert (guard.min_losses, guard.detectable_drop(power=0.8)) == (5, 0.581)
    assert SignGuard(n_tasks=4, alpha=0.05).detectable_drop(power=0.8) is None  # 1/16 > 0.05


def test_a_guard_baseline_is_not_refused_for_its_size_but_still_for_failures():
    base, _ = _paired(4)
    assert baseline_problems(base, GUARD, tasksets=4) == []
    assert baseline_problems(base, TaskPolicy(), tasksets=4)  # judge mode refuses 4 tasks
    failed = dataclasses.replace(base.episodes[0], ok=False, reward=None, error="boom")
    broken = dataclasses.replace(base, episodes=(failed, *base.episodes[1:]), failures=1)
    assert "baseline episodes failed" in baseline_problems(broken, GUARD, tasksets=4)[0]


def test_the_mode_replaces_the_judge_flag():
    assert TaskPolicy().judge and TaskPolicy().decides
    assert not GUARD.judge and GUARD.decides
    assert not TaskPolicy(mode="smoke").judge and not TaskPolicy(mode="smoke").decides
    with pytest.raises(ValueError, match="task tier mode must be one of judge, guard, smoke"):
        TaskPolicy(mode="gate")
