"""The sequential test's walk lengths (eval.walks), checked against simulated walks."""

from __future__ import annotations

import random

import pytest

from eval.decision import TaskPolicy
from eval.walks import expected_longest_walk, expected_walk, lookahead, quiet_walk


def _simulated_walks(design, n_tasks: int, walks: int, runs: int, seed: int = 0) -> tuple[float, float]:
    """Mean length of one walk and of the longest of `walks`, by simulating lossless candidates."""
    rng = random.Random(seed)
    p = design.planned_discordance / 2

    def one() -> int:
        outcomes = ["lost" if (u := rng.random()) < p else "gained" if u < 2 * p else "tie" for _ in range(n_tasks)]
        return design.walk(outcomes).tasks_used

    singles, longest = [], []
    for _ in range(runs):
        lengths = [one() for _ in range(walks)]
        singles.append(lengths[0])
        longest.append(max(lengths))
    return sum(singles) / runs, sum(longest) / runs


def test_walk_lengths_match_simulated_walks_of_the_sequential_test():
    design = TaskPolicy().design(2)
    single, longest = _simulated_walks(design, 600, 3, runs=1500)
    assert expected_walk(design, 600) == pytest.approx(single, rel=0.06)
    assert expected_longest_walk(design, 600, 3) == pytest.approx(longest, rel=0.06)
    # the lazy baseline answers at least one walk, more for more judged candidates, never past the taskset
    assert expected_walk(design, 600) < expected_longest_walk(design, 600, 3) < 600
    assert expected_longest_walk(design, 50, 10) <= 50


def test_a_quiet_walk_stops_at_the_futility_stop_and_the_lookahead_is_the_expected_walk_rounded_up():
    design = TaskPolicy().design(2)
    assert quiet_walk(design, 600) == design.walk(["tie"] * 600).tasks_used < 600
    assert lookahead(design, 600) == -(-expected_walk(design, 600) // 1)
