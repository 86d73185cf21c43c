"""How many answers a configuration can hold in flight: their KV cache pages beside its weights, under the budget.

A task suite keeps several requests in flight; each holds the pages of its prompt and of its longest answer
(exllamav3 reserves a job's pages for its prompt and its whole answer budget when it admits the job, in
256-token pages, and queues a job the cache cannot hold). On a 24 GiB card a 27B's weights leave room for only
so many long thinking answers at once: the memory model's count, the configuration's peak with a cache of
exactly those pages (at its own cache format), calibrated, held against the usable budget. And the server's
own cache holds only cache_tokens of them: the count is the smaller of the two. A cache smaller than one
answer still serves one at a time: exllamav3 cuts a job's answer budget to the room its cache has.

Usage:
    fit = answers_in_flight(MemoryModel(info), baseline_config, Budget(vram_bytes=24 * GiB), calibration,
                            tokens_per_answer=1024 + 8192, most=8)
    fit.answers, fit.describe()      # 0: not even one fits
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from search_space.budget import Budget, check_fit
from search_space.calibration import Calibration
from search_space.errors import SearchSpaceError
from search_space.memory import MemoryModel
from serving.config import PAGE_TOKENS, Exl3Args, ServingConfig

__all__ = ["InFlightFit", "answers_in_flight"]


@dataclass(frozen=True, kw_only=True, slots=True)
class InFlightFit:
    """The most answers that fit (0: not even one), and what decided it, for the run's lines and its report."""

    answers: int
    fitted: int  # what the memory model alone fits beside the weights (before the cache's own bound)
    most: int  # the cap asked for, lowered to the batch the configuration can run at once
    held: int  # the answers the configuration's own cache holds at once (cache_tokens over tokens_per_answer)
    cache_tokens: int
    tokens_per_answer: int  # prompt and answer limit, in whole pages
    bytes_per_answer: int  # their KV cache at the configuration's cache format
    budget_bytes: int

    def describe(self) -> str:
        text = (f"an answer of {self.tokens_per_answer} tokens takes {_size(self.bytes_per_answer)} of KV cache; "
                f"{self.fitted} of at most {self.most} fit beside the weights in {_size(self.budget_bytes)}, by the "
                "memory model's peak")
        if self.cache_tokens < self.tokens_per_answer:
            text += (f"; the configuration's cache of {self.cache_tokens} tokens holds one at a time, its answer cut to "
                     "the cache's room (exllamav3 reserves each answer's pages when it admits it)")
        elif self.held < min(self.fitted, self.most):
            text += (f"; the configuration's cache of {self.cache_tokens} tokens holds {self.held} at once (exllamav3 "
                     "reserves each answer's pages when it admits it)")
        return text


def answers_in_flight(memory: MemoryModel, config: ServingConfig, budget: Budget, calibration: Calibration | None,
                      *, tokens_per_answer: int, most: int) -> InFlightFit:
    """The largest n <= `most` whose n answers' cache pages, in place of `config`'s cache, keep its calibrated peak
    within `budget`, and that `config`'s own cache holds at once. A hybrid model batches at most its cache slots at
    once, any model its max_batch_size: more in flight would wait, so `most` is lowered to that.

    Raises:
        SearchSpaceError: `config` is not an exllamav3 configuration, or `most`/`tokens_per_answer` is not positive.
    """
    if not isinstance(config.args, Exl3Args):
        raise SearchSpaceError(f"answers in flight are sized for the exllamav3 engine, not {config.engine!r}")
    if most < 1 or tokens_per_answer < 1:
        raise SearchSpaceError(f"most ({most}) and tokens_per_answer ({tokens_per_answer}) must be >= 1")
    args = config.args
    batch = min(args.max_batch_size, args.cache_slots) if memory.model.is_hybrid else args.max_batch_size
    most = min(most, batch)
    paged = -(-tokens_per_answer // PAGE_TOKENS) * PAGE_TOKENS

    def fits(n: int) -> bool:
        with_pages = dataclasses.replace(config, args=dataclasses.replace(args, cache_tokens=n * paged))
        return check_fit(memory.estimate(with_pages), budget, calibration).fits

    fitted = next((n for n in range(most, 0, -1) if fits(n)), 0)
    held = max(args.cache_tokens // paged, 1)  # one, its answer cut to the cache's room, where none fits whole
    per_answer = paged * memory.kv_bytes_per_token(args.cache_kind, args.cache_k_bits, args.cache_v_bits)
    return InFlightFit(answers=min(fitted, held), fitted=fitted, most=most, held=held, cache_tokens=args.cache_tokens,
                       tokens_per_answer=paged, bytes_per_answer=per_answer, budget_bytes=budget.vram_bytes)


def _size(n: int) -> str:
    return f"{n / 1024**3:.1f} GiB" if n >= 1024**3 else f"{n / 1024**2:.0f} MiB"
