"""Pure fidelity maths: KL divergence from top-k logprobs, top-1 agreement, greedy match length.

How the tail is handled: a server returns only the top-k log-probabilities at each position (k <= 20)
plus the log-probability of the token actually fed. We compute KL(P_ref || P_cand) on a partition of
the vocabulary into atoms whose probability is known under *both* distributions, namely every token
in both top-k lists plus the fed token, and one "tail" atom holding all remaining mass
(1 - sum of the atoms, on each side). Merging tokens into one atom can only lower KL (log-sum
inequality), so the value is a lower bound of the full-vocabulary KL, exact when the atoms cover all
mass. It is therefore sound to *reject* on it, never to claim a candidate identical because of it;
top-1 agreement and greedy match length are reported beside it for that reason.

Near-ties: a top-1 flip between two tokens that both sides rank within TIE_MARGIN_NATS of each other is
a coin toss that any change of arithmetic order (a chunk size, a kernel) can turn, and it says nothing
about the model's ability; a model with flat logits (a random checkpoint) has many of them. Such flips
are counted in `top1_agreement` but not in `top1_decisive_agreement`, the statistic the gate uses.

Usage:
    comparison = compare_probe(reference_probe, candidate_scores)
    metrics = summarize([comparison, ...])
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from eval.records import FidelityMetrics, KindMetrics, ProbeReference, ProbeScores, TopK

__all__ = [
    "TIE_MARGIN_NATS",
    "ProbeComparison",
    "argmax_token",
    "decisive_flip",
    "compare_probe",
    "greedy_match_length",
    "position_kl",
    "summarize",
]

# Masses below this are rounding noise: the server's logprobs are float32 rounded to JSON.
_MASS_EPS = 1e-9
# 0.01 nats: the two tokens' probabilities differ by 1%, below the resolution of fp16 logits (~0.016 at 20).
TIE_MARGIN_NATS = 0.01


def argmax_token(top: TopK) -> int:
    """The most probable token of a top-k row (ties: the lowest id, so the result is deterministic)."""
    if not top:
        raise ValueError("empty top-k row: the server returned no alternatives at a scored position")
    best = max(top.values())
    return min(token for token, logprob in top.items() if logprob == best)


def _preference(top: TopK, better: int, worse: int) -> float:
    """How much `top` prefers `better` over `worse` (nats); a token outside top-k ranks at most its last entry."""
    return top[better] - top.get(worse, min(top.values()))


def decisive_flip(ref_top: TopK, cand_top: TopK, margin: float = TIE_MARGIN_NATS) -> bool:
    """The top-1 tokens differ and at least one side prefers its own choice by more than `margin`."""
    ref_best, cand_best = argmax_token(ref_top), argmax_token(cand_top)
    if ref_best == cand_best:
        return False
    return _preference(ref_top, ref_best, cand_best) > margin or _preference(cand_top, cand_best, ref_best) > margin


def position_kl(
    ref_top: TopK,
    cand_top: TopK,
    *,
    fed_token: int,
    ref_fed_logprob: float,
    cand_fed_logprob: float,
) -> float:
    """KL(ref || cand) in nats at one position, on the partition described in the module docstring."""
    atoms = {token: (lp, cand_top[token]) for token, lp in ref_top.items() if token in cand_top}
    atoms[fed_token] = (ref_fed_logprob, cand_fed_logprob)
    kl = 0.0
    p_sum = 0.0
    q_sum = 0.0
    for ref_lp, cand_lp in atoms.values():
        p = math.exp(ref_lp)
        p_sum += p
        q_sum += math.exp(cand_lp)
        kl += p * (ref_lp - cand_lp)
    p_tail = 1.0 - p_sum
    if p_tail > _MASS_EPS:
        q_tail = max(1.0 - q_sum, _MASS_EPS)
        kl += p_tail * (math.log(p_tail) - math.log(q_tail))
    # The coarse-grained KL is >= 0 exactly; tiny negatives are float rounding.
    return max(kl, 0.0)


def greedy_match_length(cand_top: Sequence[TopK], continuation_ids: Sequence[int]) -> int:
    """Tokens the candidate would generate greedily before first leaving the reference continuation.

    Under teacher forcing the context at position j is the reference prefix, so the candidate's
    free-running greedy output equals the reference exactly up to the first j where its argmax differs.
    """
    for j, (top, token) in enumerate(zip(cand_top, continuation_ids, strict=True)):
        if argmax_token(top) != token:
            return j
    return len(continuation_ids)


@dataclass(frozen=True, kw_only=True, slots=True)
class ProbeComparison:
    """Per-position comparison of one probe: the raw material `summarize` aggregates."""

    probe_id: str
    kind: str
    kl: np.ndarray  # [positions] nats
    top1_agree: np.ndarray  # [positions] bool
    decisive_flip: np.ndarray  # [positions] bool: a top-1 flip that is not a near-tie
    fed_logprob_delta: np.ndarray  # [positions] candidate - reference log p of the fed token
    greedy_match: int
    length: int


def compare_probe(reference: ProbeReference, candidate: ProbeScores) -> ProbeComparison:
    """Compare a candidate's teacher-forced scores with the reference's, position by position."""
    ref = reference.scores
    if candidate.probe_id != reference.probe_id:
        raise ValueError(f"comparing probe {candidate.probe_id!r} against reference {reference.probe_id!r}")
    if len(candidate.top) != len(ref.top):
        raise ValueError(
            f"probe {reference.probe_id}: candidate scored {len(candidate.top)} positions, "
            f"the reference {len(ref.top)}"
        )
    kl = np.empty(len(ref.top))
    agree = np.empty(len(ref.top), dtype=bool)
    decisive = np.empty(len(ref.top), dtype=bool)
    for j, token in enumerate(reference.continuation_ids):
        kl[j] = position_kl(
            ref.top[j],
            candidate.top[j],
            fed_token=token,
            ref_fed_logprob=ref.token_logprobs[j],
            cand_fed_logprob=candidate.token_logprobs[j],
        )
        agree[j] = argmax_token(ref.top[j]) == argmax_token(candidate.top[j])
        decisive[j] = decisive_flip(ref.top[j], candidate.top[j])
    delta = np.asarray(candidate.token_logprobs, dtype=float) - np.asarray(ref.token_logprobs, dtype=float)
    return ProbeComparison(
        probe_id=reference.probe_id,
        kind=reference.kind,
        kl=kl,
        top1_agree=agree,
        decisive_flip=decisive,
        fed_logprob_delta=delta,
        greedy_match=greedy_match_length(candidate.top, reference.continuation_ids),
        length=len(reference.continuation_ids),
    )


def _kind_metrics(kind: str, comparisons: Sequence[ProbeComparison]) -> KindMetrics:
    kl = np.concatenate([c.kl for c in comparisons])
    agree = np.concatenate([c.top1_agree for c in comparisons])
    return KindMetrics(
        kind=kind,
        n_positions=int(kl.size),
        kl_mean=float(kl.mean()),
        kl_p99=float(np.percentile(kl, 99)),
        kl_max=float(kl.max()),
        top1_agreement=float(agree.mean()),
    )


def summarize(comparisons: Iterable[ProbeComparison]) -> FidelityMetrics:
    """Aggregate probe comparisons: every position weighs the same, whatever probe it came from."""
    comparisons = [c for c in comparisons if c.length > 0]
    if not comparisons:
        raise ValueError("no scored positions to summarize: every probe has an empty continuation")
    whole = _kind_metrics("all", comparisons)
    kinds = sorted({c.kind for c in comparisons})
    return FidelityMetrics(
        n_probes=len(comparisons),
        n_positions=whole.n_positions,
        kl_mean=whole.kl_mean,
        kl_p99=whole.kl_p99,
        kl_max=whole.kl_max,
        top1_agreement=whole.top1_agreement,
        top1_decisive_agreement=float(1.0 - np.concatenate([c.decisive_flip for c in comparisons]).mean()),
        greedy_match_fraction=float(np.mean([c.greedy_match / c.length for c in comparisons])),
        greedy_full_matches=sum(c.greedy_match == c.length for c in comparisons),
        ref_token_logprob_delta_mean=float(np.concatenate([c.fed_logprob_delta for c in comparisons]).mean()),
        by_kind=tuple(_kind_metrics(k, [c for c in comparisons if c.kind == k]) for k in kinds),
    )
