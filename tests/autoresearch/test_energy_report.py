"""Energy per request on the workload: the request-time sum on tokens per joule, stored with each trial,
and RESULTS.md's table of the champion, the finalists and the front beside their request-time speed-ups."""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import optuna
import pytest

from autoresearch.ground.db import ResultsDB
from autoresearch.ground.errors import Unmeasured
from autoresearch.measures.energy import ENERGY_RATES, EnergyUse, read_energy, record_energy
from autoresearch.measures.request_time import RequestKind, RequestMix
from autoresearch.report.results_md import render_section
from bench.records import BenchResult, DecodePoint, PrefillPoint, ServerProfile
from bench.runs import RequestEnergy, RequestResult, RequestSpec

MIX = RequestMix((RequestKind(kind="math", context_tokens=1024, weight=0.75, prompt_tokens=1000.0, answer_tokens=400.0),
                  RequestKind(kind="code", context_tokens=1024, weight=0.25, prompt_tokens=4000.0, answer_tokens=900.0)))


def _run(point: str, max_tokens: int, energy: RequestEnergy | None, *, capped_s: float = 0.0) -> RequestResult:
    spec = RequestSpec(purpose="measure", point=point, prompt_kind="math", target_prompt_tokens=1024, prompt_chars=4000,
                       prompt_sha256="0" * 64, max_tokens=max_tokens, ignore_eos=True)
    if energy is not None:
        energy = dataclasses.replace(energy, sampled_s=2.0, power_capped_s=capped_s, power_limit_w=300.0)
    return RequestResult(spec=spec, ok=True, started_at_unix_s=0.0, latency_s=2.0, ttft_s=0.2, finish_s=1.9,
                         itl_s=(0.1,) * max(0, max_tokens - 1), text_chunks=max_tokens, finish_reason="length",
                         prompt_tokens=1024, completion_tokens=max_tokens, cached_tokens=24, energy=energy,
                         server_prefill_s=0.19 if point.startswith("prefill") else None)


def bench(prefill_tpj: dict[int, float], decode_tpj: dict[str, float], *, capped_s: float = 0.0,
          measured: bool = True) -> BenchResult:
    """A bench record whose valid runs have these tokens per joule (1000 new prompt tokens; 20 tokens decoded),
    its request time measured (the server timed its prefill: a finalist's launch counts only so)."""
    def energy(**joules) -> RequestEnergy | None:
        return RequestEnergy(method="nvml_energy_counter", request_j=99.0, **joules) if measured else None

    prefill = tuple(PrefillPoint(target_tokens=n, warmups=(), settled=True, runs=(
        _run(f"prefill@{n}", 1, energy(prefill_j=1000 / v), capped_s=capped_s),) * 3) for n, v in prefill_tpj.items())
    decode = tuple(DecodePoint(context_tokens=1024, kind=k, output_tokens=20, warmups=(), settled=True, runs=(
        _run(f"decode@1024/{k}", 20, energy(decode_j=18 / v), capped_s=capped_s),) * 3) for k, v in decode_tpj.items())
    server = ServerProfile(url="http://x", model="m", api="chat", max_model_len=None, accepts_ignore_eos=True,
                           accepts_stream_options=True, reports_cached_tokens=True, reports_timings=True)
    return BenchResult(plan={}, server=server, gpu=None, host={}, started_at="", finished_at="", probes=(),
                       prefill=prefill, decode=decode)


BASE = bench({512: 20.0, 2048: 10.0}, {"math": 0.5, "code": 0.4}, capped_s=1.0)


def test_joules_per_request_is_the_request_time_sum_on_tokens_per_joule():
    energy = BASE.energy_headline()
    assert energy["decode_tok_per_j@1024/math"] == pytest.approx(0.5)
    # prefill at 1000 and 4000 tokens: log-length interpolation between 512 and 2048, flat beyond
    at_1000 = 20.0 + (10.0 - 20.0) * (math.log(1000) - math.log(512)) / (math.log(2048) - math.log(512))
    expected = 0.75 * (1000 / at_1000 + 400 / 0.5) + 0.25 * (4000 / 10.0 + 900 / 0.4)
    assert MIX.energy_j(energy) == pytest.approx(expected)
    # the same formula as request time: tokens per joule read as tokens per second give the time
    as_rates = {k.replace("_tok_per_j", "_tok_per_s_client").replace("prefill_tok_per_s_client", "prefill_tok_per_s_server"): v
                for k, v in energy.items()}
    assert MIX.time_s(as_rates) == pytest.approx(expected)
    use = EnergyUse.of(MIX, [BASE.to_dict()])
    assert use.j_per_request == pytest.approx(expected) and use.unmeasured is None
    assert use.answer_tok_per_j == pytest.approx((0.75 * 400 + 0.25 * 900) / expected)
    assert use.power_capped_share == pytest.approx(0.5) and use.power_limit_w == 300.0


def test_a_point_without_energy_makes_the_request_unmeasured_with_its_name_never_zero():
    partial = bench({512: 20.0}, {"math": 0.5})  # the code point measured no energy
    with pytest.raises(Unmeasured, match=r"decode_tok_per_j@1024/code"):
        MIX.energy_j(partial.energy_headline())
    use = EnergyUse.of(MIX, [partial.to_dict()])
    assert use.j_per_request is None and "decode_tok_per_j@1024/code" in use.unmeasured
    blind = EnergyUse.of(MIX, [bench({512: 1.0}, {"math": 1.0, "code": 1.0}, measured=False).to_dict()])
    assert blind.j_per_request is None and "no GPU telemetry" in blind.unmeasured


def test_each_measured_trial_carries_its_energy_as_user_attributes():
    study = optuna.create_study(directions=["maximize", "maximize"])
    trial = study.ask()
    record_energy(trial, BASE, MIX)
    blind = study.ask()
    record_energy(blind, bench({512: 1.0}, {"math": 1.0, "code": 1.0}, measured=False), MIX)
    attrs = study.trials[0].user_attrs
    assert attrs["energy_j_per_request"] == pytest.approx(MIX.energy_j(BASE.energy_headline()))
    assert attrs[ENERGY_RATES] == BASE.energy_headline() and attrs["power_limit_w"] == 300.0
    assert attrs["answer_tok_per_j"] > 0 and attrs["power_capped_share"] == pytest.approx(0.5)
    blind_attrs = study.trials[1].user_attrs
    assert blind_attrs["energy_j_per_request"] is None and "no GPU telemetry" in blind_attrs["energy_unmeasured"]


def test_results_md_shows_joules_beside_request_time_for_the_champion_finalists_and_front(tmp_path):
    db = ResultsDB(f"sqlite:///{tmp_path / 'results.db'}")
    cand = bench({512: 25.0, 2048: 12.0}, {"math": 0.6, "code": 0.5})  # the drafter: less energy per token
    blind = bench({512: 1.0}, {"math": 1.0, "code": 1.0}, measured=False)
    for trial, result in ((0, BASE), (4, cand), (6, blind)):
        db.add_measurement(study="s", trial=trial, kind="bench", config_digest=f"c{trial}", payload=result.to_dict())
    for launch in (0, 1):
        for trial, result in ((0, BASE), (4, cand)):
            db.add_measurement(study="s", trial=None, kind="finalist_bench", config_digest=f"c{trial}", launch=launch,
                               payload={"trial": trial, "round": 1, "launch": launch, **result.to_dict()})
    front = [SimpleNamespace(trial=4, request_ratio=1.31), SimpleNamespace(trial=6, request_ratio=1.05)]
    finalists = [SimpleNamespace(round=1, trial=4, request_speedup=1.29), SimpleNamespace(round=1, trial=0, request_speedup=1.0)]
    champion = SimpleNamespace(trial=4, who="trial 4", request_speedup=1.29)
    report = read_energy(db, "s", MIX, 0, front, finalists, champion)
    lines = render_section("energy", report).splitlines()
    j_base, j_cand = MIX.energy_j(BASE.energy_headline()), MIX.energy_j(cand.energy_headline())
    champ = next(line for line in lines if line.startswith("| champion (trial 4) |"))
    assert champ.startswith(f"| champion (trial 4) | 1.290x | {j_cand:,.1f} | {j_cand:,.1f}, {j_cand:,.1f} | "
                            f"{j_cand / j_base:.3f}x |")
    assert "nvml_energy_counter (24 runs)" in champ  # its round's two launches: four points of three valid runs each
    assert any(line.startswith(f"| front: trial 4 | 1.310x | {j_cand:,.1f} | {j_cand:,.1f} |") for line in lines)
    assert any(line.startswith("| finalist: round 1, trial 0 | 1.000x |") and "| 1.000x |" in line for line in lines)
    blind_row = next(line for line in lines if line.startswith("| front: trial 6 |"))
    assert "| - |" in blind_row and " 0.0 " not in blind_row
    assert any(line.startswith("- front: trial 6: energy unmeasured: no GPU telemetry") for line in lines)
    text = "\n".join(lines)
    assert "enforced power limit of 300 W" in text and "never changes the GPU's power limit or clocks" in text
    assert report.launches == 6  # the blind launch had no telemetry
    assert "25% of the measured time over the 6 bench launches with GPU telemetry" in text


def test_no_baseline_no_energy_table():
    assert read_energy(None, "s", None, None, [], [], None) is None
    assert render_section("energy", None).strip() == ""


def test_a_trial_measured_without_gpu_telemetry_says_its_energy_is_unmeasured(tmp_path, small_model, monkeypatch):
    """Through the trial's stages with the fake launcher: its bench has no NVML, so the dashboard's
    attribute is None with the reason, beside a measured request-time speed-up."""
    from .fakes import FakeLauncher
    from .stage_env import StageEnv

    env = StageEnv.make(tmp_path, small_model)
    FakeLauncher(speeds={"*": (120.0, 1100.0)}).install(monkeypatch)
    env.baseline_done()
    trial = env.run({"max_chunk_size": 4096})
    assert trial.user_attrs["request_speedup"] > 0
    assert trial.user_attrs["energy_j_per_request"] is None and trial.user_attrs["answer_tok_per_j"] is None
    assert "no GPU telemetry" in trial.user_attrs["energy_unmeasured"]
    assert trial.user_attrs["energy_rates"] == {}
