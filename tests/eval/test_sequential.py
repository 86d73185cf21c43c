"""The task tier's sequential test: exact operating characteristics, checked against simulation."""

from __future__ import annotations

import random

import pytest

from eval.errors import EvalConfigError
from eval.sequential import SequentialDesign


def _simulate(design: SequentialDesign, n: int, drop: float, discordance: float, runs: int, seed: int) -> float:
    rng = random.Random(seed)
    p_lost, p_gained = (discordance + drop) / 2, (discordance - drop) / 2
    rejected = 0
    for _ in range(runs):
        outcomes = []
        for _ in range(n):
            u = rng.random()
            outcomes.append("lost" if u < p_lost else "gained" if u < p_lost + p_gained else "tie")
        rejected += design.walk(outcomes).decision == "rejected"
    return rejected / runs


@pytest.mark.parametrize(("drop", "discordance"), [(0.05, 0.10), (0.0, 0.10), (0.05, 0.2)])
def test_the_exact_characteristics_match_a_simulation(drop, discordance):
    design = SequentialDesign()
    exact = design.operating_characteristics(n_tasks=300, drop=drop, discordance=discordance).reject
    simulated = _simulate(design, 300, drop, discordance, runs=3000, seed=7)
    assert simulated == pytest.approx(exact, abs=4 * (exact * (1 - exact) / 3000) ** 0.5 + 0.003)


@pytest.mark.parametrize("discordance", [0.02, 0.1, 0.3, 0.6, 1.0])
def test_a_lossless_change_is_rejected_at_most_alpha_whatever_the_flips(discordance):
    design = SequentialDesign(alpha=0.05)
    oc = design.operating_characteristics(n_tasks=1000, drop=0.0, discordance=discordance)
    assert oc.reject <= 0.05
    assert oc.reject + oc.accept_early + oc.undecided == pytest.approx(1.0, abs=1e-9)


def test_the_default_design_is_sized_for_its_claim():
    design = SequentialDesign()
    needed = design.tasks_needed()
    assert needed == 420
    assert design.power_at(needed) >= 0.8 > design.power_at(needed - 1)
    assert design.power_at(600, discordance=0.05) > design.power_at(600) > design.power_at(600, discordance=0.3)


def test_identical_answers_stop_early_on_futility():
    design = SequentialDesign()
    walk = design.walk(["tie"] * 600)
    assert walk.decision == "accepted" and walk.tasks_used < 100
    oc = design.operating_characteristics(n_tasks=600, drop=0.0, discordance=0.0)
    assert oc.expected_tasks == pytest.approx(walk.tasks_used)


def test_a_string_of_losses_rejects_at_the_threshold():
    design = SequentialDesign()
    k = design.losses_to_reject
    assert design.walk(["lost"] * k).decision == "rejected"
    assert design.walk(["lost"] * (k - 1)).decision == "undecided"


@pytest.mark.parametrize("kwargs", [{"alpha": 0.0}, {"power": 0.01}, {"min_drop": 0.2, "planned_discordance": 0.1},
                                    {"futility": 1.5}])
def test_nonsense_designs_are_refused(kwargs):
    with pytest.raises(EvalConfigError):
        SequentialDesign(**kwargs)
