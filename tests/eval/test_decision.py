"""The gate's pure decision functions on recorded records."""

from __future__ import annotations

import dataclasses

import pytest

from eval.decision import (
    FidelityPolicy,
    TaskPolicy,
    baseline_problems,
    compare_taskset,
    decide,
    decide_fidelity,
    mcnemar_one_sided_p,
    run_order,
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


def _episodes(spec: dict[str, list[float | None]], truncated: frozenset = frozenset()) -> tuple[EpisodeOutcome, ...]:
    """task key -> rewards of its rollouts (None: the rollout failed operationally), started in dict order."""
    out = []
    for idx, (key, rewards) in enumerate(spec.items()):
        for reward in rewards:
            out.append(
                EpisodeOutcome(
                    task_key=key,
                    task_idx=idx,
                    ok=reward is not None,
                    reward=reward,
                    truncated=key in truncated,
                    output_tokens=10,
                    model_time_s=0.1,
                    error=None if reward is not None else "ProviderError: down",
                    started_at=1000.0 + idx,
                )
            )
    return tuple(out)


def _result(spec, name="aime25", max_tokens=32768, truncated=frozenset()) -> TasksetResult:
    episodes = _episodes(spec, truncated)
    ok = [e for e in episodes if e.ok]
    return TasksetResult(
        name=name,
        taskset_id=name,
        max_tokens=max_tokens,
        tasks=len(spec),
        rollouts=len(episodes),
        failures=len(episodes) - len(ok),
        truncations=sum(e.truncated for e in episodes),
        reward_mean=sum(e.reward for e in ok) / len(ok) if ok else None,
        output_tokens=10 * len(episodes),
        model_time_s=0.1 * len(episodes),
        output_tok_per_s=100.0,
        run_dir="/runs/x",
        episodes=episodes,
    )


def _big(n=600, lose_every=None, gain_every=None, partial_every=None) -> tuple[TasksetResult, TasksetResult]:
    """A baseline correct on every other task, and a candidate that loses / gains on a schedule."""
    base, cand = {}, {}
    for i in range(n):
        key = f"t{i:04d}"
        base[key] = [1.0 if i % 2 == 0 else 0.0]
        reward = base[key][0]
        if lose_every and i % 2 == 0 and i % lose_every == 0:
            reward = 0.0
        if partial_every and i % 2 == 0 and i % partial_every == 0:
            reward = 0.65  # reasoning-gym's score for a knights-and-knaves answer with one role wrong
        if gain_every and i % 2 == 1 and (i - 1) % gain_every == 0:
            reward = 1.0
        cand[key] = [reward]
    return _result(base), _result(cand)


def test_a_candidate_with_the_same_answers_is_accepted_early():
    base, cand = _big()
    verdict = compare_taskset(base, cand, TaskPolicy())
    assert verdict.passed and verdict.decision == "accepted"
    assert (verdict.lost, verdict.gained) == (0, 0)
    assert 50 <= verdict.tasks_used <= 120 < verdict.paired_tasks == 600  # no loss at all is clear early
    assert verdict.power >= 0.8


def test_a_candidate_losing_one_answer_in_ten_is_rejected_before_the_end():
    base, cand = _big(lose_every=10)  # 1 lost per 10 tasks: a 10-point drop
    verdict = compare_taskset(base, cand, TaskPolicy())
    assert not verdict.passed and verdict.decision == "rejected"
    assert verdict.tasks_used < 200 and verdict.gained == 0
    assert "lost" in verdict.reasons[0] and "sequential test" in verdict.reasons[0]


def test_losses_balanced_by_gains_are_not_a_drop():
    base, cand = _big(lose_every=10, gain_every=10)
    verdict = compare_taskset(base, cand, TaskPolicy())
    assert verdict.passed and verdict.decision.startswith("accepted")
    assert verdict.lost > 0 and verdict.gained > 0


def test_partial_credit_is_a_wrong_answer():
    base, cand = _big(partial_every=10)
    verdict = compare_taskset(base, cand, TaskPolicy())
    assert verdict.decision == "rejected" and verdict.lost > 0
    lenient = compare_taskset(base, cand, TaskPolicy(full_credit=0.5))
    assert lenient.lost == 0


def test_the_test_follows_the_baselines_run_order():
    base, cand = _big(lose_every=10)
    # The same losses, but the baseline dispatched the tasks in reverse: the walk meets them in that order.
    reverse = {e.task_key: 5000.0 - (e.started_at or 0) for e in base.episodes}
    base = dataclasses.replace(base, episodes=tuple(dataclasses.replace(e, started_at=reverse[e.task_key])
                                                    for e in base.episodes))
    assert run_order(base)[0] == "t0599"
    verdict = compare_taskset(base, cand, TaskPolicy())
    assert verdict.decision == "rejected"


def test_a_candidate_run_cut_short_without_a_decision_fails():
    base, cand = _big(lose_every=10, gain_every=10)
    first = {f"t{i:04d}" for i in range(20)}
    cut = dataclasses.replace(cand, episodes=tuple(e for e in cand.episodes if e.task_key in first))
    verdict = compare_taskset(base, cut, TaskPolicy())
    assert not verdict.passed and verdict.decision == "incomplete"
    assert "ended after 20 of 600" in verdict.reasons[0]


def test_several_rollouts_pair_per_task_by_their_share_correct():
    base = _result({"a": [1.0, 1.0, 1.0], "b": [0.0, 0.0, 1.0]})
    cand = _result({"a": [1.0, 0.0, 0.0], "b": [1.0, 1.0, 1.0]})
    verdict = compare_taskset(base, cand, TaskPolicy(mode="smoke"))
    assert (verdict.lost, verdict.gained) == (1, 1)
    assert (verdict.baseline_correct, verdict.candidate_correct) == (1, 1)


def test_a_candidate_operational_failure_fails_closed_and_is_not_a_lost_answer():
    base, cand = _big()
    failed = dataclasses.replace(cand.episodes[0], ok=False, reward=None, error="timeout: agent_timeout")
    cand = dataclasses.replace(cand, episodes=(failed, *cand.episodes[1:]), failures=1)
    verdict = compare_taskset(base, cand, TaskPolicy())
    assert not verdict.passed and verdict.lost == 0
    assert verdict.candidate_failures == 1 and "operational failures" in verdict.reasons[0]
    assert compare_taskset(base, cand, TaskPolicy(max_candidate_failures=1)).passed


def test_too_few_paired_tasks_can_never_pass_as_a_judged_taskset():
    base = _result({"a": [1.0], "b": [0.0]})
    verdict = compare_taskset(base, base, TaskPolicy())
    assert not verdict.passed and "power" in verdict.reasons[0] and verdict.power < 0.01
    problems = baseline_problems(base, TaskPolicy(), tasksets=1)
    assert len(problems) == 1 and "2 tasks detect a 5% accuracy drop" in problems[0] and "needs 420 tasks" in problems[0]
    smoke = compare_taskset(base, base, TaskPolicy(mode="smoke"))
    assert smoke.passed and smoke.decision == "not judged (smoke)"


def test_a_baseline_with_failures_or_truncated_answers_cannot_be_the_reference():
    base, _ = _big()
    assert baseline_problems(base, TaskPolicy(), tasksets=1) == []
    keys = frozenset(f"t{i:04d}" for i in range(400))
    spec = {e.task_key: [e.reward] for e in base.episodes}
    truncated = _result(spec, truncated=keys)
    assert "hit the 32768-token budget" in baseline_problems(truncated, TaskPolicy(), tasksets=1)[0]
    spec["t0001"] = [None]
    assert "failed operationally" in baseline_problems(_result(spec), TaskPolicy(), tasksets=1)[0]


def test_the_suites_false_rejection_rate_is_shared_among_its_tasksets():
    base, cand = _big()
    one = compare_taskset(base, cand, TaskPolicy())
    two = compare_taskset(base, cand, TaskPolicy(), tasksets=2)
    assert one.alpha == 0.05 and two.alpha == 0.025 and two.power < one.power


def test_runs_under_different_budgets_or_selections_cannot_be_paired():
    base = _result({"a": [1.0]})
    with pytest.raises(EvalConfigError, match="max_tokens"):
        compare_taskset(base, _result({"a": [1.0]}, max_tokens=8192), TaskPolicy())
    with pytest.raises(EvalConfigError, match="did not"):
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
    base, cand = _big(lose_every=10)
    lost = compare_taskset(base, cand, TaskPolicy())
    same = compare_taskset(base, base, TaskPolicy())
    assert decide(fidelity=bad, tasksets=[same]).failed_stage == "fidelity"
    failed = decide(fidelity=good, tasksets=[same, lost])
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
