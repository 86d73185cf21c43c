"""Derived rates of bench.records on scripted timings, and the JSON round trip."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from bench.ladder import validate_run
from bench.records import BenchResult, DecodePoint, PrefillPoint, ServerProfile
from bench.runs import RequestResult, RequestSpec


def _spec(max_tokens: int) -> RequestSpec:
    return RequestSpec(
        purpose="measure",
        point="decode@1024/math",
        prompt_kind="math",
        target_prompt_tokens=1024,
        prompt_chars=4000,
        prompt_sha256="0" * 64,
        max_tokens=max_tokens,
        ignore_eos=True,
    )


def _scripted_decode(n_tokens: int = 11, ttft: float = 0.5, itl: float = 0.02) -> RequestResult:
    """A ScriptedStream: one token per chunk, first at `ttft`, then one every `itl` seconds."""
    return RequestResult(
        spec=_spec(n_tokens),
        ok=True,
        started_at_unix_s=0.0,
        latency_s=ttft + itl * (n_tokens - 1) + 0.001,
        ttft_s=ttft,
        finish_s=ttft + itl * (n_tokens - 1),
        itl_s=(itl,) * (n_tokens - 1),
        text_chunks=n_tokens,
        finish_reason="length",
        prompt_tokens=1000,
        completion_tokens=n_tokens,
        cached_tokens=0,
        server_prefill_s=0.4,
        server_decode_s=itl * n_tokens,
    )


def test_client_decode_rate_is_exact_for_one_token_per_chunk():
    r = _scripted_decode(n_tokens=11, itl=0.02)
    assert r.decode_tok_per_s_client == pytest.approx(50.0)
    assert r.decode_tok_per_s_server == pytest.approx(50.0)


def test_latency_covers_ttft_plus_the_inter_token_gaps():
    r = _scripted_decode()
    assert r.latency_s >= r.ttft_s + sum(r.itl_s)


def test_template_text_before_the_first_token_does_not_inflate_decode_speed():
    # transformers serve streams the template's opening reasoning "\n" before prefill ends
    honest = _scripted_decode(n_tokens=11, itl=0.02)
    with_preamble = replace(honest, ttft_s=0.001, itl_s=(0.499, *honest.itl_s), text_chunks=12)
    assert with_preamble.decode_tok_per_s_client <= honest.decode_tok_per_s_client
    assert with_preamble.decode_tok_per_s_client == pytest.approx(50.0 * 9 / 10)


def test_prefill_rate_of_a_one_token_request_uses_its_finish_time():
    r = RequestResult(
        spec=_spec(1),
        ok=True,
        started_at_unix_s=0.0,
        latency_s=0.51,
        ttft_s=0.001,  # template text, not the model's token
        finish_s=0.5,
        prompt_tokens=1000,
        completion_tokens=1,
        cached_tokens=0,
        server_prefill_s=0.4,
    )
    assert r.prefill_tok_per_s_client == pytest.approx(2000.0)
    assert r.prefill_tok_per_s_server == pytest.approx(2500.0)


def test_cached_tokens_do_not_count_as_prefilled():
    hit = replace(_scripted_decode(), cached_tokens=256)
    assert hit.new_prompt_tokens == 744


def test_validation_rejects_cache_hits_short_completions_and_failures():
    ok = _scripted_decode(n_tokens=11)
    assert validate_run(ok, expected_completion_tokens=11, max_cached_tokens=0) is None
    short = validate_run(ok, expected_completion_tokens=16, max_cached_tokens=0)
    assert short.startswith("completion of 11 tokens, expected exactly 16")
    hit = replace(ok, cached_tokens=256)
    assert validate_run(hit, expected_completion_tokens=11, max_cached_tokens=0).startswith(
        "prefix-cache hit"
    )
    assert validate_run(hit, expected_completion_tokens=11, max_cached_tokens=256) is None
    failed = RequestResult(
        spec=_spec(4), ok=False, error="HTTP 500: boom", started_at_unix_s=0, latency_s=0.1
    )
    assert (
        validate_run(failed, expected_completion_tokens=4, max_cached_tokens=0)
        == "request failed: HTTP 500: boom"
    )


def test_invalid_runs_are_kept_but_not_summarized():
    good = [_scripted_decode(itl=0.02), _scripted_decode(itl=0.021), _scripted_decode(itl=0.019)]
    bad = replace(good[0], invalid_reason="short", itl_s=(1.0,) * 10)
    point = DecodePoint(
        context_tokens=1024, kind="math", output_tokens=11, warmups=(), runs=(*good, bad), settled=True
    )
    assert point.decode_tok_per_s_client.n == 3
    assert point.invalid_reasons == ("short",)
    assert point.decode_tok_per_s_client.median == pytest.approx(50.0)


def test_result_survives_a_json_round_trip():
    run = _scripted_decode()
    result = BenchResult(
        plan={"salt": "ab"},
        server=ServerProfile(
            url="http://127.0.0.1:1",
            model="m",
            api="chat",
            max_model_len=4096,
            accepts_ignore_eos=True,
            accepts_stream_options=True,
            reports_cached_tokens=True,
            reports_timings=True,
            server_info={"engine": "x"},
        ),
        gpu=None,
        host={"python": "3"},
        started_at="t0",
        finished_at="t1",
        probes=(run,),
        prefill=(PrefillPoint(target_tokens=1024, warmups=(run,), runs=(run, run, run), settled=True),),
        decode=(
            DecodePoint(
                context_tokens=1024, kind="math", output_tokens=11, warmups=(), runs=(run,), settled=False
            ),
        ),
    )
    text = json.dumps(result.to_dict())
    back = BenchResult.from_dict(json.loads(text))
    assert back == result
    assert back.samples() == result.samples()
    assert set(result.headline()) == {
        "prefill_tok_per_s_client@1024",
        "prefill_tok_per_s_server@1024",
        "decode_tok_per_s_client@1024/math",
        "decode_tok_per_s_server@1024/math",
    }
