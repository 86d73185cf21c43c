"""Metric identity as a type: which rate, at which point. One place writes and reads the key text.

A bench result's samples are keyed by text such as "decode_tok_per_s_client@1024/math" (JSON, the
results store, stats.compare and reference tables all key by it). `Metric` is that key parsed: code
asks `metric.rate`, `metric.tokens`, `metric.kind` and `metric.point` instead of splitting strings.

Usage:
    m = Metric.decode("decode_tok_per_s_client", 1024, "math"); str(m)  # "decode_tok_per_s_client@1024/math"
    Metric.parse("prefill_tok_per_s_server@8192").point                  # "prefill@8192"
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from bench.errors import BenchConfigError

__all__ = ["DECODE_ENERGY", "DECODE_RATES", "PREFILL_ENERGY", "PREFILL_RATES", "Metric", "Rate"]

Rate = Literal[
    "prefill_tok_per_s_client", "prefill_tok_per_s_server", "decode_tok_per_s_client", "decode_tok_per_s_server",
    "spec_acceptance", "answer_tokens", "prefill_tok_per_j", "decode_tok_per_j",
]
PREFILL_RATES: tuple[Rate, ...] = ("prefill_tok_per_s_client", "prefill_tok_per_s_server")
DECODE_RATES: tuple[Rate, ...] = ("decode_tok_per_s_client", "decode_tok_per_s_server")
# tokens per joule, measured beside the rates and shaped like them (higher is better, one value per run), so
# bench.stats' noise floor and comparison apply to energy unchanged; never mixed into the speeds
PREFILL_ENERGY: Rate = "prefill_tok_per_j"
DECODE_ENERGY: Rate = "decode_tok_per_j"
_PREFILL_SIDE = (*PREFILL_RATES, PREFILL_ENERGY)
# measured at decode points beside the rates, never compared as speeds: draft acceptance, the length
# of the model's own answers (where they end, by its end of sequence), and energy
_DECODE_SIDE = (*DECODE_RATES, "spec_acceptance", "answer_tokens", DECODE_ENERGY)
_KEY = re.compile(r"(?P<rate>[a-z_]+)@(?P<tokens>\d+)(?:/(?P<kind>[^@/\s]+))?")


@dataclass(frozen=True, slots=True, order=True)
class Metric:
    """One measured quantity at one ladder point: prefill at `tokens` prompt tokens, or decode after
    `tokens` of context on a prompt of `kind`."""

    rate: Rate
    tokens: int
    kind: str | None = None

    def __post_init__(self) -> None:
        decode_side = self.rate in _DECODE_SIDE
        if self.rate not in (*_PREFILL_SIDE, *_DECODE_SIDE):
            raise BenchConfigError(f"unknown rate {self.rate!r}")
        if decode_side != (self.kind is not None):
            raise BenchConfigError(f"{self.rate}: a decode-side metric has a prompt kind, a prefill one has none")

    @classmethod
    def prefill(cls, rate: Rate, tokens: int) -> Metric:
        return cls(rate, tokens)

    @classmethod
    def decode(cls, rate: Rate, tokens: int, kind: str) -> Metric:
        return cls(rate, tokens, kind)

    @classmethod
    def parse(cls, text: str) -> Metric:
        match = _KEY.fullmatch(text)
        if match is None:
            raise BenchConfigError(f"not a metric key: {text!r} (e.g. decode_tok_per_s_client@1024/math)")
        return cls(match["rate"], int(match["tokens"]), match["kind"])  # type: ignore[arg-type]

    @property
    def is_decode(self) -> bool:
        return self.kind is not None

    @property
    def point(self) -> str:
        """The ladder point's key, as DecodePoint.key / PrefillPoint.key write it."""
        return f"decode@{self.tokens}/{self.kind}" if self.is_decode else f"prefill@{self.tokens}"

    @property
    def client_timed(self) -> bool:
        return self.rate.endswith("_client")

    def __str__(self) -> str:
        return f"{self.rate}@{self.tokens}" + (f"/{self.kind}" if self.kind is not None else "")
