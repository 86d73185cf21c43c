"""One timed request, as a record: what it asked for (`RequestSpec`), what the client saw
(`RequestResult`), the GPU during it (`GpuWindow`), the energy it drew (`RequestEnergy`, computed by
bench.energy), and the project's one decode-rate formula.

A failed request is data (ok False plus error). Rates are derived properties, so a stored run can
always be recomputed; `to_dict()` writes them beside the fields and `from_dict()` skips them.

Usage:
    result = timed_stream(client, spec, body, path)       # bench.timing
    result.is_valid, result.decode_tok_per_s_client, result.to_dict()
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from bench.corpus import PromptKind
from results.jsonable import from_jsonable, to_jsonable

__all__ = ["EnergyMethod", "GpuWindow", "Purpose", "RequestEnergy", "RequestResult", "RequestSpec", "decode_tok_per_s"]

Purpose = Literal["probe", "warmup", "measure"]
# how a request's joules were found: NVML's total-energy counter, or its power samples integrated
EnergyMethod = Literal["nvml_energy_counter", "power_samples"]


def decode_tok_per_s(tokens: int | None, itl_s: Sequence[float]) -> float | None:
    """The project's one decode rate: tokens after the first two over the span from the second to the last.

    `itl_s` are the gaps between successive arrivals (text chunks, or tokens). The span starts at the
    second arrival because the first may be template text sent before prefill ends; exact when each
    arrival is one token, and when the first is template text it counts one token too few (-0.4 % at
    256 tokens), never too many. None: fewer than three tokens, or no time between them.
    """
    span_s = sum(itl_s[1:])
    if tokens is None or tokens < 3 or span_s <= 0:
        return None
    return (tokens - 2) / span_s


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuWindow:
    """GPU state over one request, from NVML samples taken while it ran."""

    samples: int
    sm_clock_mhz_min: int
    sm_clock_mhz_max: int
    mem_clock_mhz_min: int
    mem_clock_mhz_max: int
    power_w_mean: float | None
    power_w_max: float | None
    temperature_c_max: int
    utilization_pct_mean: float | None
    memory_used_bytes_max: int
    throttle_reasons: tuple[str, ...]  # union over the samples, benign reasons left out
    compute_processes_max: int | None = None  # more than the server's one: the GPU was shared

    @property
    def is_throttled(self) -> bool:
        return bool(self.throttle_reasons)


@dataclass(frozen=True, kw_only=True, slots=True)
class RequestEnergy:
    """Joules the GPU drew over one request's intervals (bench.energy.request_energy), and its power cap.

    `method` None: unmeasured, and `unmeasured` says why; a joule value None: that interval was not
    measured (a request with no token has no prefill interval). Never 0.0 for "not measured".
    """

    method: EnergyMethod | None
    unmeasured: str | None = None
    note: str | None = None  # why the counter was set aside for the power samples
    request_j: float | None = None  # request sent -> stream closed
    prefill_j: float | None = None  # request sent -> prefill done (RequestResult.prefill_time_client_s)
    decode_j: float | None = None  # second -> last text chunk (RequestResult.decode_span_s)
    sampled_s: float = 0.0  # time between the first and last NVML reading
    power_capped_s: float = 0.0  # of it, time NVML reported the sw_power_cap throttle reason
    power_limit_w: float | None = None  # the enforced power limit seen (the user's; bench never sets it)


@dataclass(frozen=True, kw_only=True, slots=True)
class RequestSpec:
    """What one request asked for; `prompt_sha256` shows that no two prompts were the same."""

    purpose: Purpose
    point: str  # "prefill@8192", "decode@1024/math", or "probe"
    prompt_kind: PromptKind | str  # "mixed" for prefill study sets; a workload kind's name
    target_prompt_tokens: int | None
    prompt_chars: int
    prompt_sha256: str
    max_tokens: int
    ignore_eos: bool  # whether the field was sent


@dataclass(frozen=True, kw_only=True, slots=True)
class RequestResult:
    """One streamed request as the client saw it. A failed request is data: ok False plus error."""

    spec: RequestSpec
    ok: bool
    error: str | None = None
    http_status: int | None = None
    started_at_unix_s: float
    latency_s: float  # request sent -> stream closed
    ttft_s: float | None = None  # request sent -> first chunk with generated text
    finish_s: float | None = None  # request sent -> the chunk carrying finish_reason
    itl_s: tuple[float, ...] = ()  # gaps between successive text chunks
    text_chunks: int = 0
    finish_reason: str | None = None
    prompt_tokens: int | None = None  # usage, as the server counted
    completion_tokens: int | None = None
    cached_tokens: int | None = None  # None: the server does not report it
    server_queue_s: float | None = None  # usage.timings extension, where reported
    server_prefill_s: float | None = None
    server_decode_s: float | None = None
    # usage.speculative extension (this project's server), where reported: drafted tokens the model
    # accepted and rejected in this request; drafted = accepted + rejected. None: not reported
    spec_accepted_tokens: int | None = None
    spec_rejected_tokens: int | None = None
    gpu: GpuWindow | None = None
    energy: RequestEnergy | None = None  # None: no GPU telemetry (or a record from before bench measured energy)
    invalid_reason: str | None = None  # set by the ladder: why this run does not count

    @property
    def is_valid(self) -> bool:
        return self.ok and self.invalid_reason is None

    @property
    def prefill_time_client_s(self) -> float | None:
        """The client's prefill time: TTFT, or for a one-token request the time its stream finished.

        A one-token request is done when its only token is out, so its finish time is its TTFT, and
        unlike the first text chunk it cannot be flattered by servers that stream template text
        before the model's first token (`transformers serve` sends the opening reasoning "\\n" of a
        thinking template at once).
        """
        if self.spec.max_tokens == 1 and self.finish_s is not None:
            return self.finish_s
        return self.ttft_s

    @property
    def decode_span_s(self) -> float:
        """Second text chunk -> last text chunk: the client's view of decode time.

        It starts at the second chunk because the first may be template text sent before prefill
        ends (see prefill_time_client_s); decode_tok_per_s_client counts the tokens after it.
        """
        return sum(self.itl_s[1:])

    @property
    def spec_drafted_tokens(self) -> int | None:
        if self.spec_accepted_tokens is None or self.spec_rejected_tokens is None:
            return None
        return self.spec_accepted_tokens + self.spec_rejected_tokens

    @property
    def new_prompt_tokens(self) -> int | None:
        if self.prompt_tokens is None:
            return None
        return self.prompt_tokens - (self.cached_tokens or 0)

    @property
    def prefill_tok_per_s_client(self) -> float | None:
        """Uncached prompt tokens over the client's prefill time (includes HTTP and queueing)."""
        n, t = self.new_prompt_tokens, self.prefill_time_client_s
        return n / t if n and t else None

    @property
    def prefill_tok_per_s_server(self) -> float | None:
        n = self.new_prompt_tokens
        return n / self.server_prefill_s if n and self.server_prefill_s else None

    @property
    def decode_tok_per_s_client(self) -> float | None:
        """Completion tokens after the first two over the second-to-last text chunk span (`decode_tok_per_s`)."""
        return decode_tok_per_s(self.completion_tokens, self.itl_s)

    @property
    def prefill_tok_per_j(self) -> float | None:
        """Uncached prompt tokens per joule of the client's prefill interval: prefill_tok_per_s_client's
        tokens over energy instead of time (higher is better, so bench.stats treats it as a rate)."""
        n, e = self.new_prompt_tokens, self.energy.prefill_j if self.energy else None
        return n / e if n and e and e > 0 else None

    @property
    def decode_tok_per_j(self) -> float | None:
        """decode_tok_per_s_client's tokens (after the first two) per joule of its span (second -> last chunk)."""
        e = self.energy.decode_j if self.energy else None
        if self.completion_tokens is None or self.completion_tokens < 3 or not e or e <= 0:
            return None
        return (self.completion_tokens - 2) / e

    @property
    def decode_tok_per_s_server(self) -> float | None:
        """Completion tokens over the server's own decode time (its definition of decode_s)."""
        if not self.completion_tokens or not self.server_decode_s:
            return None
        return self.completion_tokens / self.server_decode_s

    def to_dict(self) -> dict[str, Any]:
        """The fields and the derived rates beside them (which `from_dict` skips)."""
        derived = ("prefill_tok_per_s_client", "prefill_tok_per_s_server", "decode_tok_per_s_client",
                   "decode_tok_per_s_server", "spec_drafted_tokens", "prefill_tok_per_j", "decode_tok_per_j")
        return to_jsonable(self) | {name: getattr(self, name) for name in derived}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RequestResult:
        return from_jsonable(cls, d)
