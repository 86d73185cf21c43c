"""The sequential test's walk lengths: how many tasks a judged candidate answers before its walk stops.

The task tier's runtime asks them (how far a candidate answers ahead of the baseline's answers: `lookahead`;
how far a candidate that flips nothing runs: `quiet_walk`) and so does the night plan (the expected and the
longest walks, what the lazy baseline answers). They are the sequential test's own arithmetic
(eval.sequential), exact on a lossless change at the design's planned discordance, or read from the walks a
study measured.

Usage:
    lookahead(policy.design(tasksets), 600)     # tasks answered ahead of the baseline
    expected_longest_walk(design, 600, walks=3)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import cache

from eval.sequential import SequentialDesign

__all__ = ["expected_longest_walk", "expected_walk", "longest_walk_past", "lookahead", "quiet_walk",
           "walk_survival"]


@cache
def _undecided(design: SequentialDesign, n_tasks: int, discordance: float) -> tuple[float, ...]:
    """P(the walk on a lossless change is still running after t tasks), t = 1..n_tasks."""
    return tuple(oc.undecided for oc in design._curve(n_tasks, 0.0, discordance))


def walk_survival(design: SequentialDesign, n_tasks: int, discordance: float | None = None,
                  walks: Sequence[int] = ()) -> tuple[float, ...]:
    """P(a judged candidate's walk runs past t tasks), t = 0..n_tasks: the measured walks' share where some
    were measured (a study's own candidates), else the sequential test's exact curve for a lossless change
    at `discordance` (the design's planned one by default). Measured walks have no tail past the longest
    seen: over many judgments the plan's longest walk, what the baseline answers, is then a floor."""
    if walks:
        return tuple(sum(w > t for w in walks) / len(walks) for t in range(n_tasks + 1))
    d = design.planned_discordance if discordance is None else discordance
    return (1.0, *_undecided(design, n_tasks, d)[:-1], 0.0)


def expected_walk(design: SequentialDesign, n_tasks: int, discordance: float | None = None) -> float:
    """Expected tasks one judged candidate answers on a lossless change (the common case past fidelity)."""
    return expected_longest_walk(design, n_tasks, 1, discordance)


def expected_longest_walk(design: SequentialDesign, n_tasks: int, walks: int, discordance: float | None = None) -> float:
    """Expected tasks of the longest of `walks` independent walks.

    E[max] = sum over t >= 0 of P(max > t), and P(max <= t) = P(one walk <= t) ** walks.
    """
    return longest_walk_past(walk_survival(design, n_tasks, discordance), walks)


def quiet_walk(design: SequentialDesign, n_tasks: int) -> int:
    """How far the walk of a candidate that flips no task runs: to the futility stop (all of n_tasks if
    none comes first). On a lossless change this is the common walk, and no walk that loses a task is shorter."""
    return design.walk(["tie"] * n_tasks).tasks_used


def lookahead(design: SequentialDesign, n_tasks: int) -> int:
    """How far a judged candidate answers ahead of the baseline's answers before the baseline is launched to
    answer on (the loop's lazy baseline): a lossless change's expected walk."""
    return math.ceil(expected_walk(design, n_tasks))


def longest_walk_past(survival: Sequence[float], walks: int, first: int = 0) -> float:
    """E[max(longest of `walks` walks - first, 0)]: what the lazy baseline answers past its first answers."""
    if walks <= 0:
        return 0.0
    return sum(1.0 - (1.0 - s) ** walks for s in survival[first:])
