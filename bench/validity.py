"""What makes a measured run count: the validity rules, the stall check, and the rate each point settles on.

Kept apart from the ladder (bench.ladder) because stored results are judged by the same rules after the
fact: `mark_stalls` re-applies the stall check to records made before run_bench did.
"""

from __future__ import annotations

import dataclasses
import logging

from bench.records import BenchResult, ServerProfile
from bench.runs import RequestResult
from bench.stats import find_stalls

__all__ = ["DECODE_RATE", "mark_run_stalls", "mark_stalls", "prefill_rate", "size_error", "validate_run"]

log = logging.getLogger("bench.ladder")

# the rate each ladder settles and checks for stalls on; mark_stalls must judge stored runs by the same one
DECODE_RATE = "decode_tok_per_s_client"


def prefill_rate(server: ServerProfile) -> str:
    """The server's own prefill timing where it reports one: the client's adds a fixed cost of HTTP,
    templating and tokenizing (~70 ms) that, on a small fast model, is as large as the prefill itself
    and swings between launches, so a point would never settle on it."""
    return "prefill_tok_per_s_server" if server.reports_timings else "prefill_tok_per_s_client"


def validate_run(
    result: RequestResult, *, expected_completion_tokens: int | tuple[int, int] | None, max_cached_tokens: int
) -> str | None:
    """Why a run must not count, or None. `expected_completion_tokens`: exactly that many, a (least, most)
    range (the model's own answers, ended by its end of sequence), or None: at least one."""
    if not result.ok:
        return f"request failed: {result.error}"
    if result.prompt_tokens is None or result.completion_tokens is None:
        return "the stream carried no usage (prompt_tokens, completion_tokens)"
    if result.cached_tokens is not None and result.cached_tokens > max_cached_tokens:
        return (
            f"prefix-cache hit: {result.cached_tokens} of {result.prompt_tokens} prompt tokens cached "
            f"(more than {max_cached_tokens})"
        )
    if result.prefill_time_client_s is None:
        return "no token arrived"
    if expected_completion_tokens is None:
        if result.completion_tokens < 1:
            return "no completion token"
    elif isinstance(expected_completion_tokens, tuple):
        least, most = expected_completion_tokens
        if not least <= result.completion_tokens <= most:
            return (
                f"completion of {result.completion_tokens} tokens, expected {least} to {most} "
                f"(finish_reason {result.finish_reason!r}): too short to time decode"
                if result.completion_tokens < least else
                f"completion of {result.completion_tokens} tokens, more than the {most} asked for"
            )
    elif result.completion_tokens != expected_completion_tokens:
        return (
            f"completion of {result.completion_tokens} tokens, expected exactly {expected_completion_tokens} "
            f"(finish_reason {result.finish_reason!r})"
        )
    return None


def mark_stalls(result: BenchResult) -> BenchResult:
    """`result` with stalled runs invalidated, as run_bench does now; for records made before it did.

    Idempotent: a run already invalid stays as it is and is not compared with.
    """

    def point(p, rate: str):
        runs = list(p.runs)
        mark_run_stalls(p.key, runs, rate)
        return dataclasses.replace(p, runs=tuple(runs))

    return dataclasses.replace(
        result,
        prefill=tuple(point(p, prefill_rate(result.server)) for p in result.prefill),
        decode=tuple(point(d, DECODE_RATE) for d in result.decode),
    )


def mark_run_stalls(key: str, runs: list[RequestResult], rate: str) -> None:
    """Invalidate, in place, valid runs that stalled (bench.stats.find_stalls); once marked, a run stays out."""
    candidates = [i for i, r in enumerate(runs) if r.is_valid and getattr(r, rate) is not None]
    stalls = find_stalls(
        [getattr(runs[i], rate) for i in candidates],
        [runs[i].gpu.utilization_pct_mean if runs[i].gpu is not None else None for i in candidates],
    )
    for k, reason in stalls.items():
        i = candidates[k]
        log.warning("%s run %d invalid: %s", key, i + 1, reason)
        runs[i] = dataclasses.replace(runs[i], invalid_reason=reason)


def size_error(result: RequestResult, target: int) -> float | None:
    if not result.ok or result.prompt_tokens is None:
        return None
    return abs(result.prompt_tokens - target) / target
