"""Frozen records of a bench run: one ladder point, one whole run (one request: bench.runs).

Records hold raw observations; rates and summaries are derived properties, so a stored record can
always be recomputed. `to_dict()` gives JSON-able dicts (derived values included, for results.db
and people); `from_dict()` reads them back through the one serializer (`results.jsonable`), which
skips the derived values: a field added to a record is read back with no second spelling.

Usage:
    result.prefill[0].prefill_tok_per_s_client.median
    result.samples()      # {"decode_tok_per_s_client@1024/math": (70.1, 70.3, ...), ...}
    result.energy_samples()   # {"decode_tok_per_j@1024/math": (0.31, 0.30, ...), ...}: shaped as samples()
    BenchResult.from_dict(json.loads(path.read_text()))
"""

from __future__ import annotations

import hashlib
import json
import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from bench.corpus import PromptKind
from bench.metrics import DECODE_ENERGY, DECODE_RATES, PREFILL_ENERGY, PREFILL_RATES, Metric, Rate
from bench.runs import RequestResult
from bench.stats import Summary, drift_rel, summarize
from openai_client import Api
from results.jsonable import from_jsonable, to_jsonable

__all__ = ["BenchResult", "DecodePoint", "GpuIdentity", "PrefillPoint", "ServerProfile", "plan_digest", "power_use"]

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


def power_use(runs: tuple[RequestResult, ...]) -> dict[str, Any] | None:
    """How the GPU's energy was measured over these runs, and how much of their time it was power-capped.

    None: no run carried an energy record (no GPU telemetry). `power_capped_share` is the sw_power_cap
    time over the sampled time; `energy_unmeasured` the reasons of runs whose joules are unknown."""
    energies = [r.energy for r in runs if r.energy is not None]
    if not energies:
        return None
    sampled = sum(e.sampled_s for e in energies)
    capped = sum(e.power_capped_s for e in energies)
    limits = [e.power_limit_w for e in energies if e.power_limit_w is not None]
    return {
        "power_limit_w": max(limits) if limits else None,
        "power_limit_w_min": min(limits) if limits else None,  # below the max: the user changed it meanwhile
        "sampled_s": round(sampled, 3),
        "power_capped_s": round(capped, 3),
        "power_capped_share": capped / sampled if sampled > 0 else None,
        "energy_methods": dict(Counter(e.method or "unmeasured" for e in energies)),
        "energy_unmeasured": sorted({e.unmeasured for e in energies if e.unmeasured}),
        "energy_notes": sorted({e.note for e in energies if e.note}),
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
            "power": power_use(self.valid_runs),
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
    def prefill_tok_per_j(self) -> Summary | None:
        """Uncached prompt tokens per joule of the prefill interval, over the valid runs that measured it."""
        return _summary(self._rates(PREFILL_ENERGY))

    @property
    def cache_hits(self) -> int:
        return sum(1 for r in self.runs if r.cached_tokens)

    @property
    def drift_rel(self) -> float | None:
        return drift_rel(self._rates("prefill_tok_per_s_client"))

    def to_dict(self) -> dict[str, Any]:
        d = {"key": self.key, "target_tokens": self.target_tokens, "cache_hits": self.cache_hits}
        for name in ("ttft_s", "prefill_tok_per_s_client", "prefill_tok_per_s_server", PREFILL_ENERGY):
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
    def decode_tok_per_j(self) -> Summary | None:
        """Decoded tokens per joule of the decode span, over the valid runs that measured it."""
        return _summary(self._rates(DECODE_ENERGY))

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
        for name in ("decode_tok_per_s_client", "decode_tok_per_s_server", DECODE_ENERGY):
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

    def energy_samples(self) -> dict[str, tuple[float, ...]]:
        """Valid per-run tokens per joule by metric key ("decode_tok_per_j@1024/math"): the same shape as
        samples(), so stats.noise_floor and stats.compare read energy as they read speed. A point whose
        valid runs measured no energy is absent (unmeasured), never 0."""
        out: dict[str, tuple[float, ...]] = {}
        for point, rate in (*((p, PREFILL_ENERGY) for p in self.prefill), *((d, DECODE_ENERGY) for d in self.decode)):
            if vals := tuple(point._rates(rate)):
                out[str(point.metric(rate))] = vals
        return out

    def energy_headline(self) -> dict[str, float]:
        """Median tokens per joule of every point, keyed as in energy_samples()."""
        return {k: summarize(v).median for k, v in self.energy_samples().items()}

    def power(self) -> dict[str, Any] | None:
        """The valid runs' energy methods, power limit and power-capped share (`power_use`); None: no telemetry."""
        return power_use(tuple(r for p in (*self.prefill, *self.decode) for r in p.valid_runs))

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
            "server": to_jsonable(self.server),
            "gpu": to_jsonable(self.gpu),
            "host": self.host,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "headline": self.headline(),
            "acceptance": self.acceptance(),
            "answers": self.answers(),
            "energy": self.energy_headline(),
            "power": self.power(),
            "probes": [r.to_dict() for r in self.probes],
            "prefill": [p.to_dict() for p in self.prefill],
            "decode": [d.to_dict() for d in self.decode],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BenchResult:
        """Read back what `to_dict` wrote (its derived values, such as `headline`, are recomputed)."""
        return from_jsonable(cls, d)
