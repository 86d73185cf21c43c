"""Frozen records of a bench run: one request, one ladder point, one whole run.

Records hold raw observations; rates and summaries are derived properties, so a stored record can
always be recomputed. `to_dict()` gives JSON-able dicts (derived values included, for results.db
and people); `from_dict()` reads them back (derived values are ignored and recomputed).

Why one module of ~500 lines: the records, their derived rates and their (de)serialization are one
schema; split, a field added to a record would have to be added in two files in step.

Usage:
    result.prefill[0].prefill_tok_per_s_client.median
    result.samples()      # {"decode_tok_per_s_client@1024/math": (70.1, 70.3, ...), ...}
    BenchResult.from_dict(json.loads(path.read_text()))
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from bench.corpus import PromptKind
from bench.metrics import DECODE_RATES, PREFILL_RATES, Metric, Rate
from bench.stats import Summary, drift_rel, summarize
from openai_client import Api

__all__ = [
    "BenchResult",
    "DecodePoint",
    "GpuIdentity",
    "GpuWindow",
    "PrefillPoint",
    "RequestResult",
    "RequestSpec",
    "ServerProfile",
    "decode_tok_per_s",
    "plan_digest",
]

Purpose = Literal["probe", "warmup", "measure"]


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
class GpuIdentity:
    """Which GPU the numbers come from, read through NVML."""

    index: int
    name: str
    uuid: str
    driver_version: str
    memory_total_bytes: int
    power_limit_w: float | None
    max_sm_clock_mhz: int | None
    max_mem_clock_mhz: int | None


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
    def decode_tok_per_s_server(self) -> float | None:
        """Completion tokens over the server's own decode time (its definition of decode_s)."""
        if not self.completion_tokens or not self.server_decode_s:
            return None
        return self.completion_tokens / self.server_decode_s

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        for name in (
            "prefill_tok_per_s_client",
            "prefill_tok_per_s_server",
            "decode_tok_per_s_client",
            "decode_tok_per_s_server",
            "spec_drafted_tokens",
        ):
            d[name] = getattr(self, name)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RequestResult:
        known = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        kw["spec"] = RequestSpec(**kw["spec"])
        kw["itl_s"] = tuple(kw.get("itl_s", ()))
        if kw.get("gpu") is not None:
            gpu = dict(kw["gpu"])
            gpu["throttle_reasons"] = tuple(gpu["throttle_reasons"])
            kw["gpu"] = GpuWindow(**gpu)
        return cls(**kw)


def plan_digest(plan: dict[str, Any]) -> str:
    """sha256 of a plan's canonical JSON without its salt: equal for runs that measure the same way."""
    d = {k: v for k, v in plan.items() if k != "salt"}
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()


def _summary(values: list[float]) -> Summary | None:
    return summarize(values) if values else None


def _gpu_dict(runs: tuple[RequestResult, ...]) -> dict[str, Any] | None:
    windows = [r.gpu for r in runs if r.gpu is not None]
    if not windows:
        return None
    return {
        "sm_clock_mhz_min": min(w.sm_clock_mhz_min for w in windows),
        "sm_clock_mhz_max": max(w.sm_clock_mhz_max for w in windows),
        "temperature_c_max": max(w.temperature_c_max for w in windows),
        "power_w_max": max((w.power_w_max for w in windows if w.power_w_max is not None), default=None),
        "throttled_runs": sum(w.is_throttled for w in windows),
        "throttle_reasons": sorted({r for w in windows for r in w.throttle_reasons}),
    }


@dataclass(frozen=True, kw_only=True, slots=True)
class _Point:
    warmups: tuple[RequestResult, ...]
    runs: tuple[RequestResult, ...]
    settled: bool  # stopped because the spread reached its target (False: stopped at the cap)

    @property
    def valid_runs(self) -> tuple[RequestResult, ...]:
        return tuple(r for r in self.runs if r.is_valid)

    @property
    def invalid_reasons(self) -> tuple[str, ...]:
        return tuple(r.invalid_reason or r.error or "failed" for r in self.runs if not r.is_valid)

    @property
    def prompt_tokens_median(self) -> float | None:
        s = _summary([r.prompt_tokens for r in self.valid_runs if r.prompt_tokens is not None])
        return s.median if s else None

    def _rates(self, name: str) -> list[float]:
        return [v for r in self.valid_runs if (v := getattr(r, name)) is not None]

    def _base_dict(self) -> dict[str, Any]:
        return {
            "settled": self.settled,
            "valid_runs": len(self.valid_runs),
            "invalid_reasons": list(self.invalid_reasons),
            "prompt_tokens_median": self.prompt_tokens_median,
            "gpu": _gpu_dict(self.runs),
            "warmups": [r.to_dict() for r in self.warmups],
            "runs": [r.to_dict() for r in self.runs],
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class PrefillPoint(_Point):
    """Cold time-to-first-token at one prompt length; every prompt unique, so nothing is cached."""

    target_tokens: int

    @property
    def key(self) -> str:
        return Metric.prefill("prefill_tok_per_s_server", self.target_tokens).point

    def metric(self, rate: Rate) -> Metric:
        return Metric.prefill(rate, self.target_tokens)

    @property
    def ttft_s(self) -> Summary | None:
        """The client's prefill time (see RequestResult.prefill_time_client_s)."""
        return _summary([t for r in self.valid_runs if (t := r.prefill_time_client_s) is not None])

    @property
    def prefill_tok_per_s_client(self) -> Summary | None:
        return _summary(self._rates("prefill_tok_per_s_client"))

    @property
    def prefill_tok_per_s_server(self) -> Summary | None:
        return _summary(self._rates("prefill_tok_per_s_server"))

    @property
    def cache_hits(self) -> int:
        return sum(1 for r in self.runs if r.cached_tokens)

    @property
    def drift_rel(self) -> float | None:
        return drift_rel(self._rates("prefill_tok_per_s_client"))

    def to_dict(self) -> dict[str, Any]:
        d = {"key": self.key, "target_tokens": self.target_tokens, "cache_hits": self.cache_hits}
        for name in ("ttft_s", "prefill_tok_per_s_client", "prefill_tok_per_s_server"):
            s = getattr(self, name)
            d[name] = s.to_dict() if s else None
        d["drift_rel"] = self.drift_rel
        return d | self._base_dict()


@dataclass(frozen=True, kw_only=True, slots=True)
class DecodePoint(_Point):
    """Batch-1 greedy streaming decode after a natural prompt of one kind: output_tokens exactly, or the
    model's own answer up to that many (the plan's decode_until)."""

    context_tokens: int
    kind: PromptKind | str  # a corpus kind, or a workload kind (a suite's taskset)
    output_tokens: int

    @property
    def key(self) -> str:
        return self.metric("decode_tok_per_s_client").point

    def metric(self, rate: Rate) -> Metric:
        return Metric.decode(rate, self.context_tokens, self.kind)

    @property
    def decode_tok_per_s_client(self) -> Summary | None:
        return _summary(self._rates("decode_tok_per_s_client"))

    @property
    def decode_tok_per_s_server(self) -> Summary | None:
        return _summary(self._rates("decode_tok_per_s_server"))

    @property
    def _spec_runs(self) -> tuple[RequestResult, ...]:
        """Valid runs whose server reported its drafting (None counts are not zeros)."""
        return tuple(r for r in self.valid_runs if r.spec_drafted_tokens is not None)

    @property
    def spec_drafted_tokens(self) -> int | None:
        """Draft tokens proposed over the valid runs; None where the server reported no drafting."""
        runs = self._spec_runs
        return sum(r.spec_drafted_tokens for r in runs) if runs else None

    @property
    def spec_accepted_tokens(self) -> int | None:
        runs = self._spec_runs
        return sum(r.spec_accepted_tokens for r in runs) if runs else None

    @property
    def spec_acceptance(self) -> float | None:
        """Accepted / drafted tokens, pooled over the valid runs that report it; None when nothing was drafted."""
        drafted = self.spec_drafted_tokens
        return self.spec_accepted_tokens / drafted if drafted else None

    @property
    def spec_accepted_per_token(self) -> float | None:
        """Accepted drafts per completion token: the share of the output the drafter supplied."""
        runs = self._spec_runs
        completion = sum(r.completion_tokens or 0 for r in runs)
        return sum(r.spec_accepted_tokens for r in runs) / completion if runs and completion else None

    @property
    def answer_tokens(self) -> tuple[int, ...]:
        """The model's own answer lengths here: completions of requests sent without ignore_eos (the
        point's warm-ups always; its runs too with decode_until "eos"). One that reached max_tokens
        is a lower bound: that answer goes on."""
        return tuple(r.completion_tokens for r in (*self.warmups, *self.runs)
                     if r.ok and not r.spec.ignore_eos and r.completion_tokens is not None)

    @property
    def answer_tokens_median(self) -> float | None:
        return statistics.median(self.answer_tokens) if self.answer_tokens else None

    @property
    def runs_pass_the_answer(self) -> bool:
        """Its fixed-length runs (ignore_eos) went on past the model's answer: the median answer is shorter."""
        m = self.answer_tokens_median
        return m is not None and m < self.output_tokens and any(r.spec.ignore_eos for r in self.runs)

    @property
    def drift_rel(self) -> float | None:
        return drift_rel(self._rates("decode_tok_per_s_client"))

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "key": self.key,
            "context_tokens": self.context_tokens,
            "kind": self.kind,
            "output_tokens": self.output_tokens,
            "answer_tokens_median": self.answer_tokens_median,
        }
        for name in ("decode_tok_per_s_client", "decode_tok_per_s_server"):
            s = getattr(self, name)
            d[name] = s.to_dict() if s else None
        for name in ("spec_drafted_tokens", "spec_accepted_tokens", "spec_acceptance", "spec_accepted_per_token"):
            d[name] = getattr(self, name)
        d["drift_rel"] = self.drift_rel
        return d | self._base_dict()


@dataclass(frozen=True, kw_only=True, slots=True)
class ServerProfile:
    """What the server under test is and which OpenAI extensions it honours (found by probing)."""

    url: str  # base URL, never with a key
    model: str
    api: Api
    max_model_len: int | None  # from /v1/models where listed
    accepts_ignore_eos: bool  # the server took the `ignore_eos` field (vLLM, TabbyAPI, ours)
    accepts_stream_options: bool
    reports_cached_tokens: bool  # usage.prompt_tokens_details.cached_tokens seen
    reports_timings: bool  # usage.timings.prefill_s / decode_s seen
    server_info: dict[str, Any] | None = field(default=None)  # GET /v1/server_info, where it exists
    # prompt tokens the server caches for every prompt (its chat template's fixed opening, a BOS),
    # learned from its reports on unique set-up prompts; None: not reported, or from an older record
    shared_prefix_tokens: int | None = None
    max_cached_tokens: int | None = None  # the limit runs were judged by (more cached: a cache hit)
    reports_speculative: bool | None = None  # usage.speculative seen (the server drafts); None: older record


def _points(rows: list[dict[str, Any]], cls: type, keys: tuple[str, ...]) -> tuple[Any, ...]:
    return tuple(
        cls(
            warmups=tuple(RequestResult.from_dict(r) for r in row["warmups"]),
            runs=tuple(RequestResult.from_dict(r) for r in row["runs"]),
            settled=row["settled"],
            **{k: row[k] for k in keys},
        )
        for row in rows
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class BenchResult:
    """One bench run against one server: the plan, the server, the GPU, and every point."""

    plan: dict[str, Any]  # BenchPlan.to_dict(): the plan as run
    server: ServerProfile
    gpu: GpuIdentity | None
    host: dict[str, str]  # client-side provenance: bench/httpx/python versions, platform
    started_at: str  # ISO 8601, UTC
    finished_at: str
    probes: tuple[RequestResult, ...]  # set-up and global warm-up requests, never measured
    prefill: tuple[PrefillPoint, ...]
    decode: tuple[DecodePoint, ...]

    def samples(self) -> dict[str, tuple[float, ...]]:
        """Valid per-run rates by metric key, for stats.compare and stats.noise_floor."""
        out: dict[str, tuple[float, ...]] = {}
        for point, rates in ((p, PREFILL_RATES) for p in self.prefill):
            for rate in rates:
                if vals := tuple(point._rates(rate)):
                    out[str(point.metric(rate))] = vals
        for point, rates in ((d, DECODE_RATES) for d in self.decode):
            for rate in rates:
                if vals := tuple(point._rates(rate)):
                    out[str(point.metric(rate))] = vals
        return out

    def headline(self) -> dict[str, float]:
        """Median of every metric, keyed as in samples()."""
        return {k: summarize(v).median for k, v in self.samples().items()}

    def acceptance(self) -> dict[str, float]:
        """Pooled draft acceptance of every decode point that drafted, keyed "spec_acceptance@1024/math".

        Kept apart from samples(): a configuration that does not draft has no acceptance, and
        compare() must not call that a missing measurement of its speed.
        """
        return {str(d.metric("spec_acceptance")): d.spec_acceptance for d in self.decode
                if d.spec_acceptance is not None}

    def answers(self) -> dict[str, float]:
        """The median length of the model's own answers at each decode point that saw one, keyed
        "answer_tokens@1024/math": where it is under the plan's decode_tokens, a fixed-length run
        times mostly text past the answer (which drafting predicts far better than the answer)."""
        return {str(d.metric("answer_tokens")): d.answer_tokens_median for d in self.decode
                if d.answer_tokens_median is not None}

    @property
    def invalid_runs(self) -> int:
        return sum(len(p.runs) - len(p.valid_runs) for p in (*self.prefill, *self.decode))

    def to_dict(self) -> dict[str, Any]:
        return {
            "plan": self.plan,
            "plan_digest": plan_digest(self.plan),
            "server": dataclasses.asdict(self.server),
            "gpu": dataclasses.asdict(self.gpu) if self.gpu else None,
            "host": self.host,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "headline": self.headline(),
            "acceptance": self.acceptance(),
            "answers": self.answers(),
            "probes": [r.to_dict() for r in self.probes],
            "prefill": [p.to_dict() for p in self.prefill],
            "decode": [d.to_dict() for d in self.decode],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BenchResult:
        return cls(
            plan=d["plan"],
            server=ServerProfile(**d["server"]),
            gpu=GpuIdentity(**d["gpu"]) if d.get("gpu") else None,
            host=d["host"],
            started_at=d["started_at"],
            finished_at=d["finished_at"],
            probes=tuple(RequestResult.from_dict(r) for r in d["probes"]),
            prefill=_points(d["prefill"], PrefillPoint, ("target_tokens",)),
            decode=_points(d["decode"], DecodePoint, ("context_tokens", "kind", "output_tokens")),
        )
