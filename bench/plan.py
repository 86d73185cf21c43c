"""What to measure and how hard to try: the frozen plan every bench run starts from.

Usage:
    plan = BenchPlan(prefill_tokens=(1024, 8192), decode_context_tokens=(1024,), max_repeats=6)
    plan.digest      # sha256 of the canonical JSON, for results rows
"""

from __future__ import annotations

import dataclasses
import secrets
from dataclasses import dataclass, field
from typing import Any

from bench.corpus import KINDS, PromptKind
from bench.errors import BenchConfigError
from bench.records import plan_digest
from openai_client import Api

__all__ = ["BenchPlan"]


_OWN_FIELDS = frozenset(
    {
        "model",
        "messages",
        "prompt",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "stream",
        "stream_options",
        "ignore_eos",
        "n",
    }
)


def _salt() -> str:
    # a fresh salt per run: a server measured twice must not find the first run's prompts cached
    return secrets.token_hex(4)


@dataclass(frozen=True, kw_only=True, slots=True)
class BenchPlan:
    """A prefill ladder and a decode ladder, with the repeat, warm-up and validity rules."""

    prefill_tokens: tuple[int, ...] = (1024, 8192, 32768)  # prompt lengths of the TTFT ladder
    decode_context_tokens: tuple[int, ...] = (1024, 8192)  # prompt lengths before decoding
    decode_kinds: tuple[PromptKind | str, ...] = KINDS  # one decode point per context and kind
    # a workload's summary (bench.workload.Workload.summary: name, sha256, weights): decode_kinds are
    # then its kinds, and run_bench must be given the workload itself
    workload: dict[str, Any] | None = None
    decode_tokens: int = 256  # output length: exactly this ("length"), or at most this ("eos")
    # "length": ignore_eos is sent and a run must give exactly decode_tokens (the text past the model's
    # answer counts too); "eos": the model's own answers, each ending at its end of sequence or at
    # decode_tokens, and a run shorter than decode_min_tokens is invalid. Past its answer a model
    # writes text that drafting predicts far better than the answer itself (repeats, padding), so
    # "eos" is the honest decode of a drafted configuration whose model answers within decode_tokens.
    decode_until: str = "length"
    decode_min_tokens: int = 16  # "eos" only: the shortest run that times decode
    min_repeats: int = 3  # valid measured runs per point, at least
    max_repeats: int = 10  # measured runs per point, at most (valid or not); without bench_time_s only
    # the measured runs' time, split equally among the points: a point repeats until its median's interval meets
    # its target and its runs no longer trend, or its share is spent (not a count); None: max_repeats ends a point
    bench_time_s: float | None = None
    warmup_requests: int = 2  # before any point: discarded (autotuning, allocator, clocks)
    warmups_per_point: int = 1  # per point, discarded; they also fit the prompt size
    prefill_target_rel_ci: float = 0.05  # stop when the median's half-interval is this small
    decode_target_rel_ci: float = 0.02
    size_tolerance_rel: float = 0.03  # prompt size within this of the target before measuring
    max_size_attempts: int = 3  # warm-ups spent at most per point on reaching that size
    # a run with more cached prompt tokens is a prefix-cache hit; None: the server's shared opening
    # (learned from its own reports on unique prompts) plus a few tokens of chance nonce match
    max_cached_tokens: int | None = None
    api: Api = "chat"
    request_timeout_s: float = 900.0
    # the server's GPU as a CUDA ordinal under this process's CUDA_VISIBLE_DEVICES (gpu.device's rule;
    # 0: its first entry, or NVML device 0 when unset); None: no telemetry
    gpu_index: int | None = 0
    salt: str = field(default_factory=_salt)  # makes this run's prompts unique; recorded
    # server-specific request fields, e.g. {"ban_eos_token": true} for TabbyAPI; never bench's own
    extra_body: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("prefill_tokens", "decode_context_tokens"):
            values = getattr(self, name)
            if not isinstance(values, tuple) or any(not isinstance(v, int) or v < 16 for v in values):
                raise BenchConfigError(f"{name} must be a tuple of token counts >= 16, got {values!r}")
        if not self.prefill_tokens and not self.decode_context_tokens:
            raise BenchConfigError(
                "nothing to measure: both prefill_tokens and decode_context_tokens are empty"
            )
        allowed = self._workload_kinds() or KINDS
        bad = [k for k in self.decode_kinds if k not in allowed]
        if bad or not self.decode_kinds:
            raise BenchConfigError(
                f"decode_kinds {self.decode_kinds!r}: each must be one of {', '.join(allowed)}"
            )
        self._check_decode_length()
        if not 1 <= self.min_repeats <= self.max_repeats:
            raise BenchConfigError(
                f"repeats: need 1 <= min_repeats <= max_repeats, got {self.min_repeats} and {self.max_repeats}"
            )
        if self.warmup_requests < 0 or self.warmups_per_point < 1 or self.max_size_attempts < 1:
            raise BenchConfigError(
                "warm-ups: need warmup_requests >= 0, warmups_per_point >= 1 (it fits the prompt size) "
                "and max_size_attempts >= 1"
            )
        for name in ("prefill_target_rel_ci", "decode_target_rel_ci", "size_tolerance_rel"):
            if not 0 < getattr(self, name) < 1:
                raise BenchConfigError(f"{name} must be in (0, 1), got {getattr(self, name)}")
        if self.api not in ("chat", "completions"):
            raise BenchConfigError(f"api must be 'chat' or 'completions', got {self.api!r}")
        if not isinstance(self.extra_body, dict):
            raise BenchConfigError(f"extra_body must be a JSON object, got {self.extra_body!r}")
        clash = sorted(set(self.extra_body) & _OWN_FIELDS)
        if clash:
            raise BenchConfigError(
                f"extra_body may not set {clash}: bench sets them itself (greedy, streaming, fixed length)"
            )
        if self.bench_time_s is not None and not self.bench_time_s > 0:
            raise BenchConfigError(f"bench_time_s must be positive (or None), got {self.bench_time_s}")
        if self.request_timeout_s <= 0 or (self.max_cached_tokens is not None and self.max_cached_tokens < 0):
            raise BenchConfigError("request_timeout_s must be positive and max_cached_tokens >= 0 (or None)")

    def _check_decode_length(self) -> None:
        if self.decode_tokens < 3:
            raise BenchConfigError(f"decode_tokens must be >= 3 to time decoding, got {self.decode_tokens}")
        if self.decode_until not in ("length", "eos"):
            raise BenchConfigError(f"decode_until must be 'length' or 'eos', got {self.decode_until!r}")
        if self.decode_until == "eos" and not 3 <= self.decode_min_tokens <= self.decode_tokens:
            raise BenchConfigError(
                f"decode_min_tokens must be in [3, decode_tokens={self.decode_tokens}], got {self.decode_min_tokens}"
            )

    def _workload_kinds(self) -> tuple[str, ...] | None:
        """The workload summary's kinds (None without a workload); a malformed summary is refused."""
        w = self.workload
        if w is None:
            return None
        if not (isinstance(w, dict) and isinstance(w.get("sha256"), str) and isinstance(w.get("weights"), dict)
                and w["weights"]):
            raise BenchConfigError(f"workload must be a Workload.summary() (name, sha256, weights), got {w!r}")
        return tuple(w["weights"])

    @property
    def points(self) -> int:
        return len(self.prefill_tokens) + len(self.decode_context_tokens) * len(self.decode_kinds)

    @property
    def point_time_s(self) -> float | None:
        """A point's share of bench_time_s (None: points end at max_repeats)."""
        return None if self.bench_time_s is None else self.bench_time_s / self.points

    @property
    def context_tokens_needed(self) -> int:
        """The longest request of the plan: a prefill prompt and its one token, or a decode run."""
        return max((*(t + 1 for t in self.prefill_tokens),
                    *(c + self.decode_tokens for c in self.decode_context_tokens)))

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if self.decode_until == "length":  # as plans were before "eos" existed: their digests stay the same
            del d["decode_until"], d["decode_min_tokens"]
        if self.bench_time_s is None:  # as plans were before a point's time share existed
            del d["bench_time_s"]
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BenchPlan:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise BenchConfigError(f"unknown BenchPlan key(s) {unknown}; expected some of {sorted(known)}")
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})

    @property
    def digest(self) -> str:
        """sha256 of the plan without its salt: equal for two runs that measure the same way."""
        return plan_digest(self.to_dict())
