"""Pure fidelity maths on constructed distributions: exact where the top-k covers all mass, a lower bound otherwise."""

from __future__ import annotations

import math

import numpy as np
import pytest

from eval.divergence import argmax_token, compare_probe, greedy_match_length, position_kl, summarize
from eval.records import ProbeReference, ProbeScores


def _logprobs(probs: np.ndarray) -> np.ndarray:
    return np.log(probs / probs.sum())


def _top(logprobs: np.ndarray, k: int) -> dict[int, float]:
    order = np.argsort(-logprobs)[:k]
    return {int(t): float(logprobs[t]) for t in order}


def _true_kl(p_log: np.ndarray, q_log: np.ndarray) -> float:
    p = np.exp(p_log)
    return float(np.sum(p * (p_log - q_log)))


def test_identical_distributions_have_zero_kl():
    lp = _logprobs(np.array([0.5, 0.3, 0.15, 0.05]))
    top = _top(lp, 3)
    assert position_kl(top, top, fed_token=0, ref_fed_logprob=lp[0], cand_fed_logprob=lp[0]) == 0.0


def test_kl_is_exact_when_the_top_k_covers_the_vocabulary():
    rng = np.random.default_rng(0)
    for _ in range(20):
        p = _logprobs(rng.random(6) + 0.01)
        q = _logprobs(rng.random(6) + 0.01)
        got = position_kl(_top(p, 6), _top(q, 6), fed_token=2, ref_fed_logprob=p[2], cand_fed_logprob=q[2])
        assert got == pytest.approx(_true_kl(p, q), rel=1e-9, abs=1e-12)


def test_top_k_kl_never_exceeds_the_full_vocabulary_kl():
    rng = np.random.default_rng(1)
    for _ in range(200):
        p = _logprobs(rng.dirichlet(np.full(50, 0.3)))
        q = _logprobs(np.exp(p) + rng.dirichlet(np.full(50, 0.3)) * 0.5)
        fed = int(rng.integers(50))
        got = position_kl(
            _top(p, 5), _top(q, 5), fed_token=fed, ref_fed_logprob=p[fed], cand_fed_logprob=q[fed]
        )
        assert 0.0 <= got <= _true_kl(p, q) + 1e-12


def test_the_fed_token_counts_even_outside_both_top_k_lists():
    # The candidate moves mass onto token 3, which neither top-2 list shows; only the fed token reveals it.
    p = _logprobs(np.array([0.45, 0.44, 0.10, 0.01]))
    q = _logprobs(np.array([0.45, 0.44, 0.01, 0.10]))
    without = position_kl(_top(p, 2), _top(q, 2), fed_token=0, ref_fed_logprob=p[0], cand_fed_logprob=q[0])
    with_fed = position_kl(_top(p, 2), _top(q, 2), fed_token=2, ref_fed_logprob=p[2], cand_fed_logprob=q[2])
    assert without == pytest.approx(0.0, abs=1e-12)
    assert with_fed > 0.05


def test_rounded_logprobs_summing_past_one_do_not_produce_negative_or_nan_kl():
    top = {0: math.log(0.6000001), 1: math.log(0.4000001)}
    kl = position_kl(top, top, fed_token=0, ref_fed_logprob=top[0], cand_fed_logprob=top[0])
    assert kl == 0.0


def test_argmax_breaks_ties_by_lowest_token_id():
    assert argmax_token({7: -0.5, 3: -0.5, 9: -2.0}) == 3
    with pytest.raises(ValueError):
        argmax_token({})


def test_greedy_match_length_stops_at_the_first_divergence():
    tops = [{5: -0.1, 6: -3.0}, {7: -0.2, 8: -2.0}, {1: -0.1, 9: -1.0}, {4: -0.1}]
    assert greedy_match_length(tops, [5, 7, 9, 4]) == 2
    assert greedy_match_length(tops, [5, 7, 1, 4]) == 4
    assert greedy_match_length(tops, [6, 7, 1, 4]) == 0


def _probe(probe_id: str, kind: str, tops: list[dict[int, float]], tokens: list[int]) -> ProbeReference:
    scores = ProbeScores(
        probe_id=probe_id,
        token_logprobs=tuple(t[tok] for t, tok in zip(tops, tokens, strict=True)),
        top=tuple(tops),
    )
    return ProbeReference(
        probe_id=probe_id, kind=kind, prompt_ids=(1, 2, 3), continuation_ids=tuple(tokens), scores=scores
    )


def test_summary_weighs_positions_and_reports_each_kind():
    a = _logprobs(np.array([0.7, 0.2, 0.1]))
    b = _logprobs(np.array([0.2, 0.7, 0.1]))
    ref_a = _probe("p0", "math", [_top(a, 3)] * 3, [0, 0, 0])
    ref_b = _probe("p1", "long_context", [_top(a, 3)], [0])
    same = ProbeScores(probe_id="p0", token_logprobs=(a[0],) * 3, top=(_top(a, 3),) * 3)
    flipped = ProbeScores(probe_id="p1", token_logprobs=(b[0],), top=(_top(b, 3),))
    metrics = summarize([compare_probe(ref_a, same), compare_probe(ref_b, flipped)])
    assert metrics.n_positions == 4
    assert metrics.top1_agreement == pytest.approx(0.75)
    assert metrics.kl_max == pytest.approx(_true_kl(a, b))
    assert metrics.kl_mean == pytest.approx(_true_kl(a, b) / 4)
    assert metrics.greedy_full_matches == 1
    assert metrics.greedy_match_fraction == pytest.approx(0.5)
    kinds = {k.kind: k for k in metrics.by_kind}
    assert kinds["math"].kl_max == 0.0 and kinds["long_context"].top1_agreement == 0.0


def test_comparing_different_lengths_is_an_error():
    a = _logprobs(np.array([0.7, 0.3]))
    ref = _probe("p0", "math", [_top(a, 2)] * 2, [0, 0])
    short = ProbeScores(probe_id="p0", token_logprobs=(a[0],), top=(_top(a, 2),))
    with pytest.raises(ValueError, match="positions"):
        compare_probe(ref, short)


def test_a_flip_between_near_tied_tokens_is_not_decisive():
    from eval.divergence import TIE_MARGIN_NATS, decisive_flip

    ref = {7: -11.300, 8: -11.304, 9: -11.9}  # the reference barely prefers 7 over 8
    cand = {8: -11.301, 7: -11.303, 9: -11.9}  # the candidate barely prefers 8 over 7
    assert not decisive_flip(ref, cand)
    clear = {8: -11.0, 7: -11.3, 9: -11.9}  # the candidate prefers 8 by 0.3 nats
    assert decisive_flip(ref, clear)
    assert not decisive_flip(ref, dict(ref))  # no flip at all
    # A candidate choice the reference does not even list ranks at most the reference's last entry.
    assert decisive_flip(ref, {5: -11.2, 7: -11.3})
    assert decisive_flip(ref, cand, margin=0.001) and TIE_MARGIN_NATS > 0.004


def test_summaries_report_raw_and_decisive_top1_agreement():
    ref_tops = ({1: -0.5, 2: -0.501}, {1: -0.1, 2: -3.0}, {3: -0.2, 4: -2.0}, {1: -0.3, 2: -2.0})
    cand_tops = ({2: -0.5, 1: -0.501}, {2: -0.1, 1: -3.0}, {3: -0.2, 4: -2.0}, {1: -0.3, 2: -2.0})
    reference = ProbeReference(
        probe_id="p", kind="math", prompt_ids=(0,), continuation_ids=(1, 1, 3, 1),
        scores=ProbeScores(probe_id="p", token_logprobs=tuple(t[c] for t, c in zip(ref_tops, (1, 1, 3, 1), strict=True)),
                           top=ref_tops),
    )
    candidate = ProbeScores(probe_id="p", token_logprobs=tuple(t[c] for t, c in zip(cand_tops, (1, 1, 3, 1), strict=True)),
                            top=cand_tops)
    metrics = summarize([compare_probe(reference, candidate)])
    assert metrics.top1_agreement == pytest.approx(0.5)  # positions 0 and 1 flipped
    assert metrics.top1_decisive_agreement == pytest.approx(0.75)  # only position 1's flip is decisive
    assert metrics.top1_decisive_disagreement == pytest.approx(0.25)
