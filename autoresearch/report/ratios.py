"""Every ratio RESULTS.md prints of a configuration against the baseline, by the one estimator the decisions use.

Each launch of a configuration gives its request time on the workload and that time's two parts, the prefill
part (prompt tokens over the prefill rates) and the decode part (answer tokens over the decode rates)
(autoresearch.measures.request_time). Each ratio is T(baseline) / T(it) of one of the three, over the same
launches, by autoresearch.measures.launch_costs.ratio: the estimator the finalists' decision takes its speed-up
by. With one launch a side the request time's ratio lies between its parts' (a weighted mean of them); over
several launches the estimator takes each over the launches separately, and where the launches differ it can
lie outside them: `Ratios.note` then says so, with each launch's numbers, and RESULTS.md prints it.

A study without a request mix (ranked by the geometric mean and stored before the mix) has no request time:
its decode and prefill ratios are each objective's (1 / its rate as the launch's cost), by the same function.

Usage:
    base, cand = LaunchCosts.of(mix, baseline_payloads), LaunchCosts.of(mix, candidate_payloads)
    r = ratios(base, cand, label="trial 7")     # r.request, r.decode, r.prefill, r.note
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from autoresearch.ground.errors import Unmeasured
from autoresearch.measures.launch_costs import ratio
from autoresearch.measures.objectives import objectives_from_bench
from autoresearch.measures.request_time import RequestMix
from bench import BenchResult

__all__ = ["LaunchCosts", "Ratios", "ratios"]

_TOLERANCE = 1e-9  # relative: a request time equal to a part's, up to rounding, lies within


@dataclass(frozen=True)
class LaunchCosts:
    """One configuration's launches, in order: each one's request time and its parts (seconds); without a mix,
    no request time and each objective's 1 / rate as its part."""

    request_s: tuple[float, ...]
    prefill_s: tuple[float, ...]
    decode_s: tuple[float, ...]

    @classmethod
    def of(cls, mix: RequestMix | None, payloads: Iterable[dict]) -> LaunchCosts:
        """From stored bench records (BenchResult.to_dict()); a launch that left a rate the costs need
        unmeasured is left out, as the decision leaves it out."""
        request, prefill, decode = [], [], []
        for payload in payloads:
            try:
                if mix is not None:
                    p, d = mix.parts_s(payload.get("headline") or {})
                    request.append(mix.time_s(payload.get("headline") or {}))
                else:
                    rate_d, rate_p = objectives_from_bench(BenchResult.from_dict(payload))
                    p, d = 1 / rate_p, 1 / rate_d
            except (Unmeasured, KeyError, TypeError, ValueError):
                continue
            prefill.append(p)
            decode.append(d)
        return cls(tuple(request), tuple(prefill), tuple(decode))


@dataclass(frozen=True)
class Ratios:
    """T(baseline) / T(it): above 1, it is faster. None where either side has no launch to take it from."""

    request: float | None
    decode: float | None
    prefill: float | None
    note: str | None = None  # why the request time's ratio lies outside its parts', where it does

    @property
    def outside(self) -> bool:
        if None in (self.request, self.decode, self.prefill):
            return False
        low, high = sorted((self.decode, self.prefill))
        return not low * (1 - _TOLERANCE) <= self.request <= high * (1 + _TOLERANCE)


def _one(reference: tuple[float, ...], candidate: tuple[float, ...]) -> float | None:
    verdict = ratio(reference, candidate)
    return None if verdict is None else verdict.speedup


def ratios(reference: LaunchCosts, candidate: LaunchCosts, *, label: str) -> Ratios:
    """`candidate`'s ratios against `reference`'s launches; `label` names it in the note."""
    found = Ratios(_one(reference.request_s, candidate.request_s), _one(reference.decode_s, candidate.decode_s),
                   _one(reference.prefill_s, candidate.prefill_s))
    if not found.outside:
        return found
    note = (f"{label}: request time {found.request:.3f}x lies outside its parts' ratios (decode {found.decode:.3f}x, "
            f"prefill {found.prefill:.3f}x): the estimator takes each of the three over the launches on its own "
            f"(autoresearch/measures/faster.py), and these launches differ. Per launch, baseline then {label}: "
            f"request time {_seconds(reference.request_s)} / {_seconds(candidate.request_s)} s, decode part "
            f"{_seconds(reference.decode_s)} / {_seconds(candidate.decode_s)} s, prefill part "
            f"{_seconds(reference.prefill_s)} / {_seconds(candidate.prefill_s)} s")
    return Ratios(found.request, found.decode, found.prefill, note)


def _seconds(values: tuple[float, ...]) -> str:
    return ", ".join(f"{v:.4g}" for v in values)
