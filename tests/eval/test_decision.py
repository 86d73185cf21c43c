"""The gate's pure decision functions on recorded records."""

from __future__ import annotations

import pytest

from eval.decision import (
    FidelityPolicy,
    TaskPolicy,
    compare_taskset,
    decide,
    decide_fidelity,
    mcnemar_one_sided_p,
    worst_case_floor,
)
from eval.errors import EvalConfigError
from eval.records import EpisodeOutcome, FidelityMetrics, TasksetResult


def _metrics(kl_mean=0.0, kl_p99=0.0, top1=1.0, n=100, decisive=None) -> FidelityMetrics:
    return FidelityMetrics(
        n_probes=4,
        n_positions=n,
        kl_mean=kl_mean,
        kl_p99=kl_p99,
        kl_max=kl_p99,
        top1_agreement=top1,
        greedy_match_fraction=1.0,
        greedy_full_matches=4,
        ref_token_logprob_delta_mean=0.0,
        top1_decisive_agreement=decisive,
    )


def test_the_gate_counts_decisive_top1_flips_and_every_flip_when_that_was_not_measured():
    policy = FidelityPolicy(min_floor_top1_disagreement=2e-3)  # limit 3 x 0.002 = 0.006
    near_ties = _metrics(top1=0.987, decisive=0.999)  # 1.3% flips, 0.1% of them decisive
    assert decide_fidelity(near_ties, _metrics(), policy).passed
    decisive = _metrics(top1=0.987, decisive=0.990)
    verdict = decide_fidelity(decisive, _metrics(), policy)
    assert not verdict.passed and "top1_disagreement 0.01 exceeds 0.006" in verdict.reasons[0]
    legacy = _metrics(top1=0.987)  # stored before the decisive statistic existed: every flip counts
    assert not decide_fidelity(legacy, _metrics(), policy).passed


def test_a_zero_noise_floor_falls_back_to_the_minimum_floor():
    policy = FidelityPolicy(
        noise_factor=3.0, min_floor_kl_mean=1e-4, min_floor_kl_p99=1e-3, min_floor_top1_disagreement=0.01
    )
    verdict = decide_fidelity(_metrics(kl_mean=2.9e-4, kl_p99=2.9e-3, top1=0.971), _metrics(), policy)
    assert verdict.passed
    assert [c.limit for c in verdict.checks] == pytest.approx([3e-4, 3e-3, 0.03])
    failing = decide_fidelity(_metrics(kl_mean=3.1e-4, kl_p99=1e-4, top1=1.0), _metrics(), policy)
    assert not failing.passed
    assert [c.name for c in failing.checks if not c.passed] == ["kl_mean"]
    assert "kl_mean" in failing.reasons[0]


def test_a_measured_noise_floor_scales_the_limit():
    policy = FidelityPolicy(
        noise_factor=2.0, min_floor_kl_mean=1e-6, min_floor_kl_p99=1e-6, min_floor_top1_disagreement=0.0
    )
    floor = _metrics(kl_mean=0.01, kl_p99=0.05, top1=0.95)
    assert decide_fidelity(_metrics(kl_mean=0.02, kl_p99=0.1, top1=0.90), floor, policy).passed
    verdict = decide_fidelity(_metrics(kl_mean=0.0201, kl_p99=0.1, top1=0.90), floor, policy)
    assert not verdict.passed


def test_fidelity_against_a_different_reference_is_refused():
    with pytest.raises(EvalConfigError, match="same reference"):
        decide_fidelity(_metrics(n=100), _metrics(n=90), FidelityPolicy())


@pytest.mark.parametrize(
    "kwargs", [{"noise_factor": 0.5}, {"noise_factor": float("nan")}, {"min_floor_kl_mean": -1.0}]
)
def test_invalid_fidelity_policies_are_rejected(kwargs):
    with pytest.raises(EvalConfigError):
        FidelityPolicy(**kwargs)


def _episodes(spec: dict[str, list[float | None]]) -> tuple[EpisodeOutcome, ...]:
    """task key -> rewards of its rollouts (None: the rollout failed operationally)."""
    out = []
    for idx, (key, rewards) in enumerate(spec.items()):
        for reward in rewards:
            out.append(
                EpisodeOutcome(
                    task_key=key,
                    task_idx=idx,
                    ok=reward is not None,
                    reward=reward,
                    truncated=False,
                    output_tokens=10,
                    model_time_s=0.1,
                    error=None if reward is not None else "ProviderError: down",
                )
            )
    return tuple(out)


def _result(spec, name="aime25", max_tokens=32768) -> TasksetResult:
    episodes = _episodes(spec)
    ok = [e for e in episodes if e.ok]
    return TasksetResult(
        name=name,
        taskset_id=name,
        max_tokens=max_tokens,
        tasks=len(spec),
        rollouts=len(episodes),
        failures=len(episodes) - len(ok),
        truncations=0,
        reward_mean=sum(e.reward for e in ok) / len(ok) if ok else None,
        output_tokens=10 * len(episodes),
        model_time_s=0.1 * len(episodes),
        output_tok_per_s=100.0,
        run_dir="/runs/x",
        episodes=episodes,
    )


def test_flips_count_lost_and_gained_tasks():
    base = _result({"a": [1.0], "b": [1.0], "c": [0.0], "d": [1.0], "e": [0.0]})
    cand = _result({"a": [1.0], "b": [0.0], "c": [1.0], "d": [0.0], "e": [0.0]})
    verdict = compare_taskset(base, cand, TaskPolicy(margin=1))
    assert (verdict.lost, verdict.gained, verdict.paired_tasks) == (2, 1, 5)
    assert verdict.passed  # lost - gained = 1 <= margin
    strict = compare_taskset(base, cand, TaskPolicy(margin=0))
    assert not strict.passed and "lost 2, gained 1" in strict.reasons[0]


def test_several_rollouts_pair_per_task_by_correct_counts():
    base = _result({"a": [1.0, 1.0, 1.0], "b": [0.0, 0.0, 1.0]})
    cand = _result({"a": [1.0, 0.0, 0.0], "b": [1.0, 1.0, 1.0]})
    verdict = compare_taskset(base, cand, TaskPolicy())
    assert (verdict.lost, verdict.gained) == (2, 2)
    assert (verdict.baseline_correct, verdict.candidate_correct) == (4, 4)


def test_a_candidate_operational_failure_fails_closed_and_is_not_a_lost_answer():
    base = _result({"a": [1.0], "b": [0.0]})
    cand = _result({"a": [None], "b": [0.0]})
    verdict = compare_taskset(base, cand, TaskPolicy(margin=5))
    assert not verdict.passed
    assert verdict.candidate_failures == 1
    assert "operational failures" in verdict.reasons[0]
    tolerant = compare_taskset(base, cand, TaskPolicy(margin=5, max_candidate_failures=1))
    assert tolerant.passed


def test_tasks_the_baseline_failed_on_are_left_unpaired():
    base = _result({"a": [None], "b": [1.0]})
    cand = _result({"a": [0.0], "b": [1.0]})
    verdict = compare_taskset(base, cand, TaskPolicy(margin=0))
    assert verdict.unpaired_tasks == ("a",)
    assert verdict.paired_tasks == 1 and verdict.lost == 0 and verdict.passed


def test_max_lost_fails_even_when_gains_balance_losses():
    base = _result({k: [1.0] for k in "abc"} | {k: [0.0] for k in "def"})
    cand = _result({k: [0.0] for k in "abc"} | {k: [1.0] for k in "def"})
    assert compare_taskset(base, cand, TaskPolicy(margin=1)).passed
    assert not compare_taskset(base, cand, TaskPolicy(margin=1, max_lost=3)).passed


def test_runs_under_different_budgets_or_selections_cannot_be_paired():
    base = _result({"a": [1.0]})
    with pytest.raises(EvalConfigError, match="max_tokens"):
        compare_taskset(base, _result({"a": [1.0]}, max_tokens=8192), TaskPolicy())
    with pytest.raises(EvalConfigError, match="different tasks"):
        compare_taskset(base, _result({"z": [1.0]}), TaskPolicy())
    with pytest.raises(EvalConfigError, match="cannot pair"):
        compare_taskset(base, _result({"a": [1.0]}, name="mmlu-pro"), TaskPolicy())


def test_exact_mcnemar_matches_the_binomial_tail():
    assert mcnemar_one_sided_p(0, 0) == 1.0
    assert mcnemar_one_sided_p(6, 0) == pytest.approx(1 / 64)
    assert mcnemar_one_sided_p(7, 1) == pytest.approx(9 / 256)
    assert mcnemar_one_sided_p(0, 3) == 1.0


def test_decide_stops_at_fidelity_and_otherwise_needs_every_taskset_to_pass():
    policy = FidelityPolicy()
    bad = decide_fidelity(_metrics(kl_mean=1.0, kl_p99=1.0), _metrics(), policy)
    good = decide_fidelity(_metrics(), _metrics(), policy)
    base = _result({"a": [1.0], "b": [1.0], "c": [1.0]})
    lost_two = compare_taskset(base, _result({"a": [0.0], "b": [0.0], "c": [1.0]}), TaskPolicy(margin=1))
    same = compare_taskset(base, base, TaskPolicy())
    assert decide(fidelity=bad, tasksets=[same]).failed_stage == "fidelity"
    failed = decide(fidelity=good, tasksets=[same, lost_two])
    assert (failed.passed, failed.failed_stage) == (False, "tasks")
    assert decide(fidelity=good, tasksets=[same]).passed
    assert decide(fidelity=good).passed
    with pytest.raises(EvalConfigError):
        decide()


def test_several_fresh_launches_give_the_worst_case_floor():
    floor = worst_case_floor(
        [_metrics(kl_mean=0.01, kl_p99=0.2, top1=0.99), _metrics(kl_mean=0.02, kl_p99=0.1, top1=0.97)]
    )
    assert (floor.kl_mean, floor.kl_p99, floor.top1_agreement) == (0.02, 0.2, 0.97)
    with pytest.raises(EvalConfigError):
        worst_case_floor([])
    with pytest.raises(EvalConfigError, match="different references"):
        worst_case_floor([_metrics(n=10), _metrics(n=11)])
