"""bench.energy: a request's joules from scripted NVML readings, on the counter and the sampled paths.

`ScriptedDriver` is a test double of the one outside boundary here, the NVML driver: it answers what
a board reports while a known power profile runs (the total-energy counter as the integral of that
power, the power reading, the sw_power_cap reason), read at irregular times with one read missing,
as bench.telemetry's sampler thread sees it. The expected joules are the profile's own integral,
computed apart from the code under test.
"""

from __future__ import annotations

import dataclasses
import sys

import pytest

from bench import BenchPlan, run_bench
from bench.energy import Reading, energy_curve, request_energy
from bench.records import BenchResult, DecodePoint, PrefillPoint, ServerProfile
from bench.runs import RequestResult, RequestSpec
from bench.telemetry import GpuMonitor
from openai_client import Endpoint
from tests.bench.fakes import FakeNvml, PrefixCachingFakeServer

START = 1_700_000_000.0  # the request's send time, Unix seconds: the clock telemetry stamps readings on


class ScriptedDriver:
    """Test double of the NVML driver: a piecewise-constant power profile, read at chosen instants.

    `steps`: (from_s, watts) on the request's clock, in order. `capped`: intervals in which NVML reports
    sw_power_cap. The counter starts at `counter0_mj`, as a real one counts from the driver's load."""

    def __init__(self, steps: list[tuple[float, float]], *, capped: tuple[tuple[float, float], ...] = (),
                 counter0_mj: int = 48_213_377_001) -> None:
        self.steps = steps
        self.capped = capped
        self.counter0_mj = counter0_mj

    def power_at(self, t: float) -> float:
        return [w for start, w in self.steps if start <= t][-1]

    def joules(self, a: float, b: float) -> float:
        """The profile's integral from a to b: the truth a reading path should recover."""
        edges = [s for s, _ in self.steps] + [float("inf")]
        return sum(w * max(0.0, min(b, edges[i + 1]) - max(a, edges[i])) for i, (_, w) in enumerate(self.steps))

    def read(self, t: float, *, counter: bool = True, power: bool = True) -> Reading:
        energy = self.counter0_mj + round(1000 * self.joules(self.steps[0][0], t)) if counter else None
        return Reading(t_s=START + t, energy_mj=energy, power_w=self.power_at(t) if power else None,
                       power_capped=any(a <= t < b for a, b in self.capped), power_limit_w=350.0)

    def readings(self, times: list[float], **kw) -> list[Reading]:
        return [self.read(t, **kw) for t in times]


# sampler instants: the entry reading just before the request is sent, uneven periods (a busy host), the
# read due near 0.40 s missing (NVML timed out), and the exit reading after the stream closed
TIMES = [-0.004, 0.093, 0.21, 0.283, 0.519]
# idle before the request, prefill hot, decode at the power cap, a dip
DRIVER = ScriptedDriver([(-0.01, 95.0), (0.0, 340.0), (0.06, 349.0), (0.35, 280.0)], capped=((0.06, 0.35),))


def _decode_request(*, ttft: float = 0.05, itl: tuple[float, ...] = (0.05, 0.1, 0.1, 0.1, 0.09),
                    latency: float = 0.5, started: float = START) -> RequestResult:
    """Six tokens: arrivals at 0.05, 0.10, 0.20, 0.30, 0.40, 0.49 s; the stream closes at `latency`."""
    spec = RequestSpec(purpose="measure", point="decode@1024/math", prompt_kind="math", target_prompt_tokens=1024,
                       prompt_chars=4000, prompt_sha256="0" * 64, max_tokens=6, ignore_eos=True)
    return RequestResult(spec=spec, ok=True, started_at_unix_s=started, latency_s=latency, ttft_s=ttft,
                         finish_s=ttft + sum(itl), itl_s=itl, text_chunks=len(itl) + 1, finish_reason="length",
                         prompt_tokens=1000, completion_tokens=len(itl) + 1, cached_tokens=24)


def test_the_counter_path_recovers_the_profile_over_each_interval_and_leaves_out_the_time_before_the_request():
    energy = request_energy(DRIVER.readings(TIMES), _decode_request())
    assert energy.method == "nvml_energy_counter" and energy.note is None and energy.unmeasured is None
    # a counter is exact at its readings; between them it holds the interval's mean power, so the
    # intervals that end inside one (0.05, 0.10, 0.49) are off by at most that interval's power swing
    assert energy.request_j == pytest.approx(DRIVER.joules(0.0, 0.5), rel=0.01)
    assert energy.prefill_j == pytest.approx(DRIVER.joules(0.0, 0.05), rel=0.05)
    assert energy.decode_j == pytest.approx(DRIVER.joules(0.10, 0.49), rel=0.02)
    # the 4 ms of idle before the request was sent are in the readings, not in the request
    assert energy.request_j < DRIVER.joules(-0.004, 0.519)
    assert energy.power_limit_w == 350.0
    assert energy.sampled_s == pytest.approx(0.523)


def test_tokens_per_joule_mirror_the_rates_formulas():
    result = dataclasses.replace(_decode_request(), energy=request_energy(DRIVER.readings(TIMES), _decode_request()))
    # the decode rate's tokens (after the first two) over the decode rate's span, in joules instead of seconds
    assert result.decode_tok_per_j == pytest.approx(4 / result.energy.decode_j)
    assert result.prefill_tok_per_j == pytest.approx((1000 - 24) / result.energy.prefill_j)


def test_a_board_without_the_counter_integrates_uneven_power_samples_exactly_for_a_linear_ramp():
    ramp = [Reading(t_s=START + t, energy_mj=None, power_w=100 + 1000 * t) for t in (-0.003, 0.041, 0.2, 0.31, 0.502)]
    energy = request_energy(ramp, _decode_request())
    assert energy.method == "power_samples" and energy.note == "no NVML energy counter on this board"

    def ramp_j(a: float, b: float) -> float:  # the integral of 100 + 1000 t
        return 100 * (b - a) + 500 * (b * b - a * a)

    # the trapezoid rule is exact on a linear power; interpolating the curve inside a trapezoid is not,
    # by at most the ramp's curvature over one gap
    assert energy.request_j == pytest.approx(ramp_j(0.0, 0.5), rel=0.01)
    assert energy.decode_j == pytest.approx(ramp_j(0.10, 0.49), rel=0.02)


@pytest.mark.parametrize(("what", "edit", "note"), [
    ("a driver reload", lambda rs: [*rs[:3], *(dataclasses.replace(r, energy_mj=r.energy_mj - 48_213_000_000)
                                               for r in rs[3:])], "went backwards"),
    ("a wrap of the 64-bit counter", lambda rs: [dataclasses.replace(r, energy_mj=r.energy_mj + 2**64 - 48_213_377_001
                                                                     - 20_000) if i < 2 else
                                                 dataclasses.replace(r, energy_mj=r.energy_mj - 48_213_377_001 - 20_000)
                                                 for i, r in enumerate(rs)], "went backwards"),
    ("a failed counter read", lambda rs: [dataclasses.replace(r, energy_mj=None) if i == 2 else r
                                          for i, r in enumerate(rs)], "not read at 1 of 5 readings"),
    ("a counter that lags", lambda rs: [dataclasses.replace(r, energy_mj=rs[0].energy_mj) for r in rs],
     "stood still while the GPU drew power"),
])
def test_a_counter_that_cannot_be_trusted_falls_back_to_the_power_samples_and_says_why(what, edit, note):
    readings = edit(DRIVER.readings(TIMES))
    energy = request_energy(readings, _decode_request())
    assert energy.method == "power_samples", what
    assert note in energy.note
    # the trapezoid over the same (uneven, one missing) readings: bounded by the profile's swing
    assert energy.request_j == pytest.approx(DRIVER.joules(0.0, 0.5), rel=0.15)
    assert energy.request_j > 0


def test_no_counter_and_no_power_is_unmeasured_with_a_reason_never_zero():
    readings = DRIVER.readings(TIMES, counter=False, power=False)
    energy = request_energy(readings, _decode_request())
    assert energy.method is None and energy.request_j is None and energy.decode_j is None
    assert energy.unmeasured == "no NVML energy counter on this board, and fewer than two power readings to integrate"
    result = dataclasses.replace(_decode_request(), energy=energy)
    assert result.decode_tok_per_j is None and result.prefill_tok_per_j is None
    assert isinstance(energy_curve(readings[:1]), str)  # one reading spans nothing
    assert "1 NVML reading" in request_energy(readings[:1], _decode_request()).unmeasured


def test_readings_that_do_not_span_the_request_leave_it_unmeasured():
    late = DRIVER.readings([0.2, 0.283, 0.519])  # the entry reading lost: the prefill is outside them
    energy = request_energy(late, _decode_request())
    assert energy.method is None and "do not span the request" in energy.unmeasured


def test_power_capped_time_is_the_share_of_the_readings_span_with_sw_power_cap():
    energy = request_energy(DRIVER.readings(TIMES), _decode_request())
    # capped at the readings 0.093, 0.21, 0.283 (inside 0.06-0.35): whole gaps between them, half the edge gaps
    expected = (0.093 + 0.004) / 2 + (0.21 - 0.093) + (0.283 - 0.21) + (0.519 - 0.283) / 2
    assert energy.power_capped_s == pytest.approx(expected, abs=1e-4)


# ---- a point's runs: validity, and idle time between them ----

def _point(runs: list[RequestResult]) -> DecodePoint:
    return DecodePoint(context_tokens=1024, kind="math", output_tokens=6, warmups=(), runs=tuple(runs), settled=True)


def _bench(point: DecodePoint, prefill: tuple[PrefillPoint, ...] = ()) -> BenchResult:
    server = ServerProfile(url="http://x", model="m", api="chat", max_model_len=None, accepts_ignore_eos=True,
                           accepts_stream_options=True, reports_cached_tokens=True, reports_timings=False)
    return BenchResult(plan={}, server=server, gpu=None, host={}, started_at="", finished_at="", probes=(),
                       prefill=prefill, decode=(point,))


def test_idle_time_between_runs_is_charged_to_no_run_and_an_invalid_run_is_set_aside_for_energy_too():
    """One driver timeline over three runs with idle gaps between them (the client's bookkeeping, the
    next prompt): each run is charged its own interval; the run bench set aside for speed is out."""
    timeline = ScriptedDriver([(-1.0, 60.0), (0.0, 330.0), (0.55, 62.0), (2.0, 345.0), (2.55, 58.0),
                               (5.0, 300.0), (5.55, 61.0)])
    runs = []
    for start, invalid in ((0.0, None), (2.0, "prefix-cache hit: 900 of 1000 prompt tokens cached"), (5.0, None)):
        request = _decode_request(started=START + start)
        readings = timeline.readings([start + t for t in TIMES])
        runs.append(dataclasses.replace(request, energy=request_energy(readings, request), invalid_reason=invalid))
    for run, start in zip(runs, (0.0, 2.0, 5.0), strict=True):
        assert run.energy.request_j == pytest.approx(timeline.joules(start, start + 0.5), rel=0.01)
    charged = sum(r.energy.request_j for r in runs)
    assert charged < 0.97 * timeline.joules(0.0, 5.5)  # the idle gaps' joules went to no run
    bench = _bench(_point(runs))
    (values,) = bench.energy_samples().values()
    assert values == (runs[0].decode_tok_per_j, runs[2].decode_tok_per_j)  # the cache hit's energy is out
    assert list(bench.energy_samples()) == ["decode_tok_per_j@1024/math"]
    power = bench.power()
    assert power["energy_methods"] == {"nvml_energy_counter": 2} and power["power_limit_w"] == 350.0
    assert bench.to_dict()["energy"] == bench.energy_headline()


def test_a_point_whose_runs_measured_no_energy_has_no_energy_value():
    unmeasured = request_energy(DRIVER.readings(TIMES, counter=False, power=False), _decode_request())
    bench = _bench(_point([dataclasses.replace(_decode_request(), energy=unmeasured)] * 3))
    assert bench.energy_samples() == {} and bench.energy_headline() == {}
    assert bench.power()["energy_unmeasured"] == [unmeasured.unmeasured]
    assert _bench(_point([_decode_request()] * 3)).power() is None  # no telemetry at all


def test_a_stored_record_reads_back_with_its_energy():
    request = _decode_request()
    run = dataclasses.replace(request, energy=request_energy(DRIVER.readings(TIMES), request))
    stored = _bench(_point([run, run])).to_dict()
    back = BenchResult.from_dict(stored)
    assert back.decode[0].runs[0].energy == run.energy
    assert back.energy_headline() == stored["energy"]


# ---- end to end: the sampler thread, the ladder, the NVML test double ----

def test_bench_records_counter_joules_for_every_valid_run_of_every_point(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    real_open = GpuMonitor.open
    monkeypatch.setattr(GpuMonitor, "open", classmethod(lambda cls, index, **kw: real_open(index, period_s=0.007)))
    plan = BenchPlan(prefill_tokens=(512,), decode_context_tokens=(512,), decode_kinds=("math",), decode_tokens=24,
                     min_repeats=3, max_repeats=3, warmup_requests=1, gpu_index=0)
    with PrefixCachingFakeServer() as server:
        nvml = FakeNvml(server)
        monkeypatch.setitem(sys.modules, "pynvml", nvml)  # where gpu.device imports it
        result = run_bench(plan, Endpoint(url=server.url))
    runs = [r for p in (*result.prefill, *result.decode) for r in p.valid_runs]
    assert runs and all(r.energy.method == "nvml_energy_counter" for r in runs)
    for r in runs:  # the fake board draws a steady 450 W: joules are 450 x the request's seconds
        assert r.energy.request_j == pytest.approx(450 * r.latency_s, rel=0.05)
        assert r.energy.power_limit_w == 700.0
    assert set(result.energy_headline()) == {"prefill_tok_per_j@512", "decode_tok_per_j@512/math"}
    assert result.power()["power_capped_share"] == 0.0


def test_bench_report_shows_tokens_per_joule_the_method_and_the_users_power_limit():
    from rich.console import Console

    from bench.report import power_line, render, summary_lines

    request = _decode_request()
    run = dataclasses.replace(request, energy=request_energy(DRIVER.readings(TIMES), request))
    bench = _bench(_point([run, run]))
    lines = summary_lines(bench)
    assert f"decode_tok_per_j@1024/math: {run.decode_tok_per_j:.4f}" in lines
    assert any(line.startswith("power_capped_share: 0.") for line in lines)
    text = power_line(bench.power())
    assert "2 runs by nvml_energy_counter" in text and "enforced power limit 350 W (the user's" in text
    console = Console(record=True, width=250)
    render(bench, console)
    shown = console.export_text()
    assert "tok/J" in shown and text in shown
    assert power_line(None) == "Energy: unmeasured (no GPU telemetry)"
