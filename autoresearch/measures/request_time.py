"""The one scalar that ranks configurations: how long a request of the workload takes.

A user waits prompt tokens / prefill rate + answer tokens / decode rate for one request, so a
configuration's worth is the workload's mean request time

    T = sum over the workload's requests of weight x (prompt_tokens / prefill_rate + answer_tokens / decode_rate)

and its speed-up is T(baseline) / T(candidate). The two rates are far from equally important: a
thinking model spends most of a request decoding (on a 3090, a 27B decodes ~43 tok/s and prefills
~700 tok/s: an 8K prompt costs ~12 s, a 3K-token answer ~70 s), so a geometric mean of the two
speed-ups ranks a prefill-only gain as high as a decode gain that saves the user far more time.

The requests are the decode points of the baseline's bench: one per workload kind and context,
weighted as the decode objective weights them (the kind's share of the workload, split equally among
the contexts). Prompt tokens are the workload's own prompts as the server counted them; answer tokens
are the baseline's own answers (bench's warm-ups run without ignore_eos to the model's end of
sequence). Where the answers are unknown (a record from before bench kept them) or went on to the
plan's limit (a model that never stopped), the plan's decode length is assumed and `assumed` says
so. The decode rate is the point's client-timed rate; the prefill rate at a prompt length is the
server-timed rate interpolated between bench's prefill points in log-length (held flat outside them).

Usage:
    mix = RequestMix.from_bench(baseline_result)           # or RequestMix.from_dict(stored)
    mix.speedup(baseline_result.headline(), candidate_result.headline())   # T(baseline) / T(candidate)
    mix.energy_j(result.energy_headline())                 # joules per request, the same sum on tokens per joule
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

from autoresearch.ground.errors import Unmeasured
from autoresearch.measures.objectives import DECODE_RATE, PREFILL_RATE
from bench import BenchResult
from bench.metrics import DECODE_ENERGY, PREFILL_ENERGY, Metric

__all__ = ["RequestKind", "RequestMix", "median_headline", "prefill_rate_at"]

@dataclass(frozen=True, kw_only=True, slots=True)
class RequestKind:
    """One kind of request in the workload: a decode point of the baseline's bench."""

    kind: str
    context_tokens: int
    weight: float  # share of the workload's requests; a mix's weights sum to 1
    prompt_tokens: float
    answer_tokens: float
    answer_assumed: str | None = None  # why answer_tokens is assumed; None: the baseline's own answers

    @property
    def decode_metric(self) -> str:
        return str(Metric.decode(DECODE_RATE, self.context_tokens, self.kind))


@dataclass(frozen=True, slots=True)
class RequestMix:
    kinds: tuple[RequestKind, ...]

    def __post_init__(self) -> None:
        if not self.kinds:
            raise ValueError("a request mix needs at least one kind of request")
        if any(not (k.weight > 0 and k.prompt_tokens > 0 and k.answer_tokens >= 0) for k in self.kinds):
            raise ValueError(f"every request needs a positive weight and prompt, and an answer (0 tokens: a model "
                             f"that answers nothing there): {self.kinds}")

    @classmethod
    def from_bench(cls, baseline: BenchResult) -> RequestMix:
        """The workload's requests as the baseline's bench saw them (its decode points)."""
        workload = baseline.plan.get("workload") or {}
        shares = workload.get("weights") or {}
        per_kind = Counter(d.kind for d in baseline.decode)  # a kind's share is split among its contexts
        raw = [shares.get(d.kind, 1.0) / per_kind[d.kind] for d in baseline.decode]
        if not raw:
            raise Unmeasured("the baseline's bench has no decode point: no request of the workload to time")
        kinds = []
        for d, share in zip(baseline.decode, raw, strict=True):
            answer, assumed = d.answer_tokens_median, None
            if answer is None:
                answer, assumed = d.output_tokens, "no answer recorded: a record from before bench kept answers"
            elif answer >= d.output_tokens:
                limit = d.output_tokens
                answer, assumed = limit, f"the answers reached the plan's {limit}-token limit: they are longer"
            prompt = d.prompt_tokens_median or d.context_tokens
            kinds.append(RequestKind(kind=str(d.kind), context_tokens=d.context_tokens, weight=share / sum(raw),
                                     prompt_tokens=float(prompt), answer_tokens=float(answer), answer_assumed=assumed))
        return cls(tuple(kinds))

    @classmethod
    def from_record(cls, payload: dict) -> RequestMix:
        """From a stored bench record (results.db's `bench` payload)."""
        return cls.from_bench(BenchResult.from_dict(payload))

    @property
    def assumed(self) -> tuple[RequestKind, ...]:
        return tuple(k for k in self.kinds if k.answer_assumed is not None)

    def time_s(self, headline: Mapping[str, float]) -> float:
        """The mean request time on rates keyed as BenchResult.headline() keys them. Raises Unmeasured
        when a rate the mix needs is missing."""
        return self._per_request(headline, PREFILL_RATE, DECODE_RATE, "request time")

    def energy_j(self, energy: Mapping[str, float]) -> float:
        """Joules per request on the workload, on tokens per joule keyed as BenchResult.energy_headline()
        keys them: the request-time sum with tokens per joule in place of tokens per second,

            E = sum over the requests of weight x (prompt_tokens / prefill_tok_per_j + answer_tokens / decode_tok_per_j)

        the same requests, weights, prompt and answer lengths, and the same log-length interpolation
        between prefill points. Each point's tokens per joule is the median over its valid runs of the
        run's tokens over the joules of the interval its rate times (bench.energy), so idle time between
        runs is in no term. Raises Unmeasured when a point the mix needs has no energy measured."""
        return self._per_request(energy, PREFILL_ENERGY, DECODE_ENERGY, "energy per request")

    @property
    def answer_tokens(self) -> float:
        """The workload's mean answer length: answer tokens per joule = answer_tokens / energy_j."""
        return sum(k.weight * k.answer_tokens for k in self.kinds)

    def parts_s(self, headline: Mapping[str, float]) -> tuple[float, float]:
        """(prefill, decode): the mean request time's two terms, prompt tokens over the prefill rates and answer
        tokens over the decode rates (time_s is their sum). Raises Unmeasured as time_s does."""
        terms = self._terms(headline, PREFILL_RATE, DECODE_RATE, "request time")
        return sum(p for p, _ in terms), sum(d for _, d in terms)

    def _per_request(self, values: Mapping[str, float], prefill_rate: str, decode_rate: str, what: str) -> float:
        return sum(p + d for p, d in self._terms(values, prefill_rate, decode_rate, what))

    def _terms(self, values: Mapping[str, float], prefill_rate: str, decode_rate: str,
               what: str) -> list[tuple[float, float]]:
        """Per kind of request, its weighted prompt and answer terms."""
        prefill = {m.tokens: v for k, v in values.items() if (m := Metric.parse(k)).rate == prefill_rate and v > 0}
        decode = {k: str(Metric.decode(decode_rate, k.context_tokens, k.kind)) for k in self.kinds}
        missing = [key for key in decode.values() if not values.get(key, 0) > 0]
        if missing or not prefill:
            raise Unmeasured(f"{what} needs {', '.join(missing) or f'a prefill rate ({prefill_rate})'} (not measured)")
        return [(k.weight * (k.prompt_tokens / prefill_rate_at(k.prompt_tokens, prefill)),
                 k.weight * (k.answer_tokens / values[decode[k]])) for k in self.kinds]

    def speedup(self, baseline: Mapping[str, float], candidate: Mapping[str, float]) -> float:
        """T(baseline) / T(candidate): above 1, the candidate answers the workload sooner."""
        return self.time_s(baseline) / self.time_s(candidate)

    def describe_assumed(self) -> str | None:
        """One sentence naming each assumed answer length, or None when every length was measured."""
        if not self.assumed:
            return None
        return "; ".join(f"{k.kind} @{k.context_tokens}: {k.answer_tokens:.0f} tokens ({k.answer_assumed})"
                         for k in self.assumed)

    def to_dict(self) -> dict:
        return {"kinds": [asdict(k) for k in self.kinds]}

    @classmethod
    def from_dict(cls, d: dict) -> RequestMix:
        return cls(tuple(RequestKind(**k) for k in d["kinds"]))


def prefill_rate_at(prompt_tokens: float, points: Mapping[int, float]) -> float:
    """The prefill rate at a prompt length: linear in log-length between the two measured points
    around it, the nearest point's rate outside them (no trend is extrapolated)."""
    if not points:
        raise ValueError("no prefill point to interpolate between")
    lengths = sorted(points)
    if prompt_tokens <= lengths[0]:
        return points[lengths[0]]
    if prompt_tokens >= lengths[-1]:
        return points[lengths[-1]]
    hi = next(i for i, n in enumerate(lengths) if n >= prompt_tokens)
    a, b = lengths[hi - 1], lengths[hi]
    frac = (math.log(prompt_tokens) - math.log(a)) / (math.log(b) - math.log(a))
    return points[a] + frac * (points[b] - points[a])


def median_headline(headlines: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """Each rate's median over launches (a key some launch lacks is left out: that launch is unmeasured there)."""
    headlines = list(headlines)
    keys = set.intersection(*(set(h) for h in headlines)) if headlines else set()
    return {k: statistics.median(h[k] for h in headlines) for k in sorted(keys)}
