"""Joules per request from NVML readings: the total-energy counter where the board has it, else power samples.

bench.telemetry reads the GPU when a request is sent, every period while it runs and when its stream
closes (`Reading`s). `energy_curve` turns them into the cumulative energy since the first reading,
piecewise linear between readings:

- `nvml_energy_counter`: NVML's total-energy counter (nvmlDeviceGetTotalEnergyConsumption, mJ since
  the driver loaded; Volta and later, the 3090 and the H200 included). Exact at each reading; between
  two, the mean power of that interval.
- `power_samples`: the trapezoid rule over the power readings. Uneven periods and a missing reading
  widen one trapezoid. Used where the counter is absent from any reading, goes backwards (a driver
  reload, or a wrap), or stands still while the GPU draws power (a counter that lags); `note` says
  which. NVML's power reading is averaged over a board-dependent window, so this path is coarser.

Neither: the request is unmeasured, with the reason, never 0.0. `request_energy` reads a request's
intervals off the curve, the ones bench's rates time: the whole request, its prefill (sent -> prefill
done, as prefill_tok_per_s_client) and its decode span (second -> last text chunk, as the decode
rate). Energy between requests (an idle GPU, the client's bookkeeping) lies in no request's
readings: it is never charged to one. Which runs count is the ladder's rule for speed
(bench.validity): the points read energy from valid runs only.

Usage:
    curve = energy_curve(readings)              # EnergyCurve, or a str: why unmeasured
    energy = request_energy(readings, result)   # RequestEnergy for the RequestResult's intervals
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from bench.runs import EnergyMethod, RequestEnergy, RequestResult

__all__ = ["EnergyCurve", "Reading", "energy_curve", "request_energy"]

# an interval may reach this far past the first or last reading (the client's clock against the sampler's)
_EDGE_S = 0.01


@dataclass(frozen=True, slots=True)
class Reading:
    """One NVML reading. `t_s`: seconds on any clock shared with the request (telemetry: Unix time)."""

    t_s: float
    energy_mj: int | None  # the total-energy counter; None: not read (unsupported, or the read failed)
    power_w: float | None
    power_capped: bool = False  # NVML reported the sw_power_cap throttle reason
    power_limit_w: float | None = None


@dataclass(frozen=True, slots=True)
class EnergyCurve:
    """Cumulative joules since the first reading, at each reading's time; linear between them."""

    times_s: tuple[float, ...]
    joules: tuple[float, ...]
    method: EnergyMethod
    note: str | None = None

    def between(self, start_s: float, end_s: float) -> float | None:
        """Joules drawn from `start_s` to `end_s`; None where the interval leaves the readings' span."""
        first, last = self.times_s[0], self.times_s[-1]
        if not (first - _EDGE_S <= start_s <= end_s <= last + _EDGE_S):
            return None
        return self._at(end_s) - self._at(start_s)

    def _at(self, t: float) -> float:
        times = self.times_s
        t = min(max(t, times[0]), times[-1])
        i = bisect.bisect_right(times, t)
        if i >= len(times):
            return self.joules[-1]
        a, b = times[i - 1], times[i]
        frac = (t - a) / (b - a) if b > a else 0.0
        return self.joules[i - 1] + frac * (self.joules[i] - self.joules[i - 1])


def energy_curve(readings: Sequence[Reading]) -> EnergyCurve | str:
    """The counter's curve where it can be trusted, else the integrated power samples; a str says why neither."""
    ordered = sorted(readings, key=lambda r: r.t_s)
    if len(ordered) < 2:
        return f"{len(ordered)} NVML reading(s) over the request: at least two are needed"
    times = tuple(r.t_s for r in ordered)
    note = _counter_unusable(ordered)
    if note is None:
        base = ordered[0].energy_mj or 0
        return EnergyCurve(times, tuple(((r.energy_mj or 0) - base) / 1000 for r in ordered), "nvml_energy_counter")
    powered = [r for r in ordered if r.power_w is not None]
    if len(powered) < 2 or powered[-1].t_s <= powered[0].t_s:
        return f"{note}, and fewer than two power readings to integrate"
    joules = [0.0]
    for a, b in zip(powered, powered[1:], strict=False):
        joules.append(joules[-1] + (b.t_s - a.t_s) * (a.power_w + b.power_w) / 2)
    return EnergyCurve(tuple(r.t_s for r in powered), tuple(joules), "power_samples", note)


def _counter_unusable(ordered: Sequence[Reading]) -> str | None:
    """Why the energy counter cannot be used over these readings, or None."""
    counts = [r.energy_mj for r in ordered]
    missing = sum(c is None for c in counts)
    if missing == len(counts):
        return "no NVML energy counter on this board"
    if missing:
        return f"the NVML energy counter was not read at {missing} of {len(counts)} readings"
    steps = [b - a for a, b in zip(counts, counts[1:], strict=False)]
    if any(s < 0 for s in steps):
        return "the NVML energy counter went backwards (a wrap or a driver reload)"
    drew_power = any((r.power_w or 0) > 0 for r in ordered) and ordered[-1].t_s > ordered[0].t_s
    if not any(steps) and drew_power:
        return "the NVML energy counter stood still while the GPU drew power"
    return None


def request_energy(readings: Sequence[Reading], result: RequestResult) -> RequestEnergy:
    """The joules of `result`'s intervals, from readings timed on the clock of its `started_at_unix_s`."""
    shifted = sorted((dataclasses.replace(r, t_s=r.t_s - result.started_at_unix_s) for r in readings),
                     key=lambda r: r.t_s)
    limits = [r.power_limit_w for r in shifted if r.power_limit_w is not None]
    sampled_s = shifted[-1].t_s - shifted[0].t_s if len(shifted) > 1 else 0.0
    capped_s = sum((b.t_s - a.t_s) * (a.power_capped + b.power_capped) / 2
                   for a, b in zip(shifted, shifted[1:], strict=False))
    power = {"sampled_s": round(sampled_s, 4), "power_capped_s": round(capped_s, 4),
             "power_limit_w": max(limits) if limits else None}
    curve = energy_curve(shifted)
    if isinstance(curve, str):
        return RequestEnergy(method=None, unmeasured=curve, **power)
    request_j = curve.between(0.0, result.latency_s)
    if request_j is None:
        return RequestEnergy(method=None, note=curve.note, **power,
                             unmeasured=f"the NVML readings ({shifted[0].t_s:.3f} to {shifted[-1].t_s:.3f} s) "
                                        f"do not span the request (0 to {result.latency_s:.3f} s)")
    prefill_end = result.prefill_time_client_s
    prefill_j = curve.between(0.0, prefill_end) if prefill_end is not None else None
    decode_j = None
    if result.ttft_s is not None and len(result.itl_s) >= 2:
        second = result.ttft_s + result.itl_s[0]
        decode_j = curve.between(second, second + result.decode_span_s)
    return RequestEnergy(method=curve.method, note=curve.note, request_j=_j(request_j), prefill_j=_j(prefill_j),
                         decode_j=_j(decode_j), **power)


def _j(value: float | None) -> float | None:
    return None if value is None else round(value, 6)
