"""Token choice for the transformers engine: penalties, temperature, top-k, top-p, min-p.

exllamav3 brings its own samplers; this module gives the CPU engine the same request semantics.
Penalties see the generated tokens only (OpenAI's presence/frequency penalties), the repetition
penalty sees prompt and output (Hugging Face's and exllamav3's convention). Logprobs reported to
clients come from the raw model distribution, before any of this.
"""

from __future__ import annotations

import torch

from serving.engine import SamplingParams

__all__ = ["choose_token", "top_logprobs"]


def choose_token(
    logits: torch.Tensor,  # [vocab], float32
    params: SamplingParams,
    *,
    context_ids: list[int],
    generated_ids: list[int],
    generator: torch.Generator,
    banned_ids: tuple[int, ...] = (),
) -> int:
    logits = logits.clone()
    if banned_ids:
        logits[list(banned_ids)] = float("-inf")
    if params.repetition_penalty != 1.0 and context_ids:
        seen = torch.tensor(sorted(set(context_ids)), dtype=torch.long)
        values = logits[seen]
        logits[seen] = torch.where(values > 0, values / params.repetition_penalty, values * params.repetition_penalty)
    if (params.presence_penalty or params.frequency_penalty) and generated_ids:
        ids, counts = torch.tensor(generated_ids, dtype=torch.long).unique(return_counts=True)
        logits[ids] -= params.presence_penalty + params.frequency_penalty * counts.to(logits.dtype)
    if params.is_greedy:
        return int(torch.argmax(logits))
    logits = logits / params.temperature
    if params.top_k > 0 and params.top_k < logits.numel():
        kth = torch.topk(logits, params.top_k).values[-1]
        logits[logits < kth] = float("-inf")
    probs = torch.softmax(logits, dim=-1)
    if params.min_p > 0.0:
        probs[probs < params.min_p * probs.max()] = 0.0
    if params.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        outside = torch.cumsum(sorted_probs, dim=-1) - sorted_probs > params.top_p
        sorted_probs[outside] = 0.0
        probs = torch.zeros_like(probs).scatter_(0, order, sorted_probs)
    return int(torch.multinomial(probs / probs.sum(), 1, generator=generator))


def top_logprobs(logprobs: torch.Tensor, n: int) -> tuple[tuple[int, float], ...]:
    if n <= 0:
        return ()
    values, ids = torch.topk(logprobs, n)
    return tuple(zip(ids.tolist(), values.tolist(), strict=True))
