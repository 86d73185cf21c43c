"""The ladders against real servers: this project's server on the tiny model, and a fake prefix cache."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys

import pytest
from rich.console import Console

from bench import BenchPlan, run_bench
from bench.errors import BenchConfigError
from bench.records import BenchResult
from bench.report import render, summary_lines
from bench.telemetry import GpuMonitor
from openai_client import Endpoint, ServerRejected, ServerUnreachable
from tests.bench.fakes import FakeNvml, PrefixCachingFakeServer

pytestmark = pytest.mark.slow

# small on purpose: 2 CPU cores; the GPU run uses the CLI defaults
PLAN = BenchPlan(
    prefill_tokens=(128, 512),
    decode_context_tokens=(256,),
    decode_tokens=16,
    min_repeats=3,
    max_repeats=4,
    warmup_requests=1,
    prefill_target_rel_ci=0.2,
    decode_target_rel_ci=0.1,
    gpu_index=None,
)


@pytest.fixture(scope="module")
def result(tiny_server) -> BenchResult:
    return run_bench(PLAN, Endpoint(url=tiny_server.url))


def _all_requests(result: BenchResult):
    yield from result.probes
    for point in (*result.prefill, *result.decode):
        yield from point.warmups
        yield from point.runs


def test_every_point_of_both_ladders_has_enough_valid_runs(result):
    assert [p.key for p in result.prefill] == ["prefill@128", "prefill@512"]
    assert [d.key for d in result.decode] == ["decode@256/math", "decode@256/code", "decode@256/mc"]
    for point in (*result.prefill, *result.decode):
        assert len(point.valid_runs) >= PLAN.min_repeats, (point.key, point.invalid_reasons)
        assert len(point.runs) <= PLAN.max_repeats
        assert point.warmups, "warm-ups are run and kept apart from the measured runs"


def test_no_request_was_served_from_a_prefix_cache_and_no_prompt_repeated(result):
    requests = list(_all_requests(result))
    assert result.server.reports_cached_tokens
    assert all(r.cached_tokens == 0 for r in requests)
    shas = [r.spec.prompt_sha256 for r in requests]
    assert len(set(shas)) == len(shas)


def test_prompt_sizes_follow_the_ladder_in_the_servers_own_tokens(result):
    small, large = (p.prompt_tokens_median for p in result.prefill)
    assert small < large
    assert large == pytest.approx(512, rel=0.35)
    for point in result.decode:
        assert point.prompt_tokens_median > 200


def test_decode_runs_have_exactly_the_fixed_length_via_ignore_eos(result):
    assert result.server.accepts_ignore_eos
    for point in result.decode:
        assert {r.completion_tokens for r in point.valid_runs} == {PLAN.decode_tokens}
        assert all(r.spec.ignore_eos for r in point.runs)


def test_server_and_client_rates_are_both_recorded_and_agree(result):
    assert result.server.reports_timings
    for point in result.prefill:
        client, server = point.prefill_tok_per_s_client.median, point.prefill_tok_per_s_server.median
        assert 0 < client <= server * 1.05  # the client's clock also sees HTTP and queueing
    for point in result.decode:
        client, server = point.decode_tok_per_s_client.median, point.decode_tok_per_s_server.median
        assert client == pytest.approx(server, rel=0.3)


def test_result_records_the_server_and_round_trips_through_json(result):
    assert result.server.server_info["engine"] == "transformers"
    assert result.gpu is None  # no NVML here: telemetry absent, not an error
    back = BenchResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert back == result
    assert back.headline() == result.headline()


def test_a_length_over_the_servers_context_is_refused_before_measuring(tiny_server):
    plan = BenchPlan(prefill_tokens=(40_000,), decode_context_tokens=(), gpu_index=None, warmup_requests=0)
    with pytest.raises(BenchConfigError, match="max_model_len"):
        run_bench(plan, Endpoint(url=tiny_server.url))


def test_an_unreachable_server_is_a_clear_error():
    with pytest.raises(ServerUnreachable, match="127.0.0.1:9"):
        run_bench(PLAN, Endpoint(url="http://127.0.0.1:9"))


# ---- prefix-cache defeat, against a fake server that has a paged prefix cache ----

FAKE_PLAN = BenchPlan(
    prefill_tokens=(512, 2048),
    decode_context_tokens=(512,),
    decode_kinds=("math",),
    decode_tokens=8,
    min_repeats=3,
    max_repeats=3,
    warmup_requests=1,
    gpu_index=None,
    salt="fixed",
)


def test_unique_prompts_never_hit_a_prefix_cache():
    with PrefixCachingFakeServer() as server:
        result = run_bench(FAKE_PLAN, Endpoint(url=server.url))
    assert result.invalid_runs == 0
    assert all(r.cached_tokens == 0 for r in _all_requests(result))


QWEN25_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."


@pytest.mark.parametrize("template", [{}, {"system_prompt": QWEN25_SYSTEM, "page_tokens": 1}],
                         ids=["paged-cache", "behind-a-shared-opening"])
def test_repeated_prompts_are_caught_as_cache_hits_and_never_averaged(template):
    with PrefixCachingFakeServer(**template) as server:
        run_bench(FAKE_PLAN, Endpoint(url=server.url))
        again = run_bench(FAKE_PLAN, Endpoint(url=server.url))  # same salt: the same prompts again
    for point in (*again.prefill, *again.decode):
        assert not point.valid_runs
        assert all(reason.startswith("prefix-cache hit") for reason in point.invalid_reasons)
    assert again.samples() == {}


def test_a_chat_templates_shared_opening_is_expected_and_only_computed_tokens_are_counted():
    """Qwen2.5's template opens every prompt with one system prompt, and a real prefix cache reuses it."""
    with PrefixCachingFakeServer(system_prompt=QWEN25_SYSTEM, page_tokens=1) as server:
        result = run_bench(FAKE_PLAN, Endpoint(url=server.url))
    # the template up to the user's text, in the fake's tokens
    opening = server.templated("").index("<|im_end|>\n<|im_start|>assistant") // 4
    assert result.server.shared_prefix_tokens is not None
    assert opening <= result.server.shared_prefix_tokens <= opening + 4
    assert result.server.max_cached_tokens == result.server.shared_prefix_tokens + 4
    assert result.invalid_runs == 0
    measured = [r for p in (*result.prefill, *result.decode) for r in p.runs]
    assert all(r.cached_tokens >= opening for r in measured)  # the opening was cached every time...
    for r in measured:  # ...and the rate counts only what was computed
        assert r.prefill_tok_per_s_client == pytest.approx((r.prompt_tokens - r.cached_tokens) / r.prefill_time_client_s)
    assert set(result.samples()) >= {"prefill_tok_per_s_client@512", "prefill_tok_per_s_client@2048",
                                     "decode_tok_per_s_client@512/math"}


def test_an_explicit_cache_limit_overrides_the_learned_opening():
    plan = dataclasses.replace(FAKE_PLAN, max_cached_tokens=0)
    with PrefixCachingFakeServer(system_prompt=QWEN25_SYSTEM, page_tokens=1) as server:
        result = run_bench(plan, Endpoint(url=server.url))
    assert result.server.max_cached_tokens == 0
    assert result.samples() == {}  # every run cached the opening: over a limit of 0
    assert all("prefix-cache hit" in reason for p in result.prefill for reason in p.invalid_reasons)


def test_the_completions_endpoint_is_measured_the_same_way(tiny_server):
    plan = BenchPlan(
        api="completions",
        prefill_tokens=(256,),
        decode_context_tokens=(256,),
        decode_kinds=("code",),
        decode_tokens=12,
        min_repeats=3,
        max_repeats=3,
        warmup_requests=0,
        gpu_index=None,
    )
    result = run_bench(plan, Endpoint(url=tiny_server.url))
    assert result.server.api == "completions"
    assert result.invalid_runs == 0
    assert set(result.samples()) == {
        "prefill_tok_per_s_client@256",
        "prefill_tok_per_s_server@256",
        "decode_tok_per_s_client@256/code",
        "decode_tok_per_s_server@256/code",
    }


TINY_FAKE_PLAN = BenchPlan(
    prefill_tokens=(256,),
    decode_context_tokens=(),
    min_repeats=1,
    max_repeats=1,
    warmup_requests=0,
    gpu_index=None,
    extra_body={"ban_eos_token": True},
)


def test_the_api_key_is_sent_and_a_wrong_one_is_a_clear_error():
    with PrefixCachingFakeServer(api_key="k-123") as server:
        with pytest.raises(ServerRejected, match=r"HTTP 401 \(check --api-key-file\)"):
            run_bench(TINY_FAKE_PLAN, Endpoint(url=server.url, api_key="wrong"))
        result = run_bench(TINY_FAKE_PLAN, Endpoint(url=server.url, api_key="k-123"))
    assert result.invalid_runs == 0
    assert "k-123" not in json.dumps(result.to_dict())


def test_extra_body_fields_reach_the_server_on_every_request():
    with PrefixCachingFakeServer() as server:
        run_bench(TINY_FAKE_PLAN, Endpoint(url=server.url))
    assert server.bodies and all(b["ban_eos_token"] is True and b["temperature"] == 0 for b in server.bodies)


def test_a_run_that_stalls_while_the_gpu_idles_is_set_aside_and_replaced(monkeypatch):
    """As a Triton compile on the first prompt of a new length does: slow, GPU idle; bench measures another."""
    plan = dataclasses.replace(FAKE_PLAN, prefill_tokens=(2048,), decode_context_tokens=(), max_repeats=5,
                               gpu_index=0)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    real_open = GpuMonitor.open
    monkeypatch.setattr(GpuMonitor, "open", classmethod(lambda cls, index, **kw: real_open(index, period_s=0.01)))
    with PrefixCachingFakeServer(stall_posts=frozenset({7}), stall_s=0.4) as server:
        nvml = FakeNvml(server)
        monkeypatch.setitem(sys.modules, "pynvml", nvml)  # where gpu.device imports it
        result = run_bench(plan, Endpoint(url=server.url))
    assert result.gpu is not None and result.gpu.uuid == nvml.gpus[0].uuid
    assert nvml.inits == nvml.shutdowns == 1  # the monitor shut NVML down after the run
    (point,) = result.prefill
    (stalled,) = server.stalled_prompts
    runs = {r.spec.prompt_sha256: r for r in point.runs}
    assert hashlib.sha256(stalled.encode()).hexdigest() in runs, "POST 7 should be a measured run"
    bad = runs[hashlib.sha256(stalled.encode()).hexdigest()]
    assert not bad.is_valid and bad.invalid_reason.startswith("stall:") and "busy against 80%" in bad.invalid_reason
    assert [r.is_valid for r in point.runs].count(False) == 1
    assert len(point.valid_runs) >= plan.min_repeats  # the stalled run was replaced, not just dropped
    assert point.prefill_tok_per_s_client.min > 10 * bad.prefill_tok_per_s_client  # the median never saw it


# ---- decode until the model's own end of sequence ----

def test_decoding_until_eos_times_the_models_own_answers_and_never_sends_ignore_eos():
    """A model that answers in 12 tokens: the fixed-length plan times 24 tokens, 12 of them past the
    answer; the eos plan times the 12 and asks for nothing past them."""
    plan = dataclasses.replace(FAKE_PLAN, prefill_tokens=(), decode_tokens=24)
    with PrefixCachingFakeServer(answer_tokens=12) as server:
        fixed = run_bench(plan, Endpoint(url=server.url))
    with PrefixCachingFakeServer(answer_tokens=12) as server:
        eos = run_bench(dataclasses.replace(plan, decode_until="eos", decode_min_tokens=8), Endpoint(url=server.url))
        eos_bodies = server.bodies
    (point,) = fixed.decode
    assert {r.completion_tokens for r in point.valid_runs} == {24}
    # its warm-ups ran to the model's end of sequence: the record says the runs went on past the answer
    # (a run set aside as a warm-up after all, when its point still trended, was sent as a run: past the answer)
    assert set(point.answer_tokens) == {12}
    assert len(point.answer_tokens) == sum(r.spec.purpose == "warmup" for r in point.warmups)
    assert point.runs_pass_the_answer and fixed.answers() == {"answer_tokens@512/math": 12}
    console = Console(record=True, width=200)
    render(fixed, console)
    assert "decode timed mostly past the model's answers at decode@512/math (answers of 12 tokens)" in console.export_text()
    assert "answer_tokens@512/math: 12" in summary_lines(fixed)
    (point,) = eos.decode
    assert len(point.valid_runs) == plan.min_repeats
    assert {r.completion_tokens for r in point.runs} == {12} and {r.finish_reason for r in point.runs} == {"stop"}
    assert not any(r.spec.ignore_eos for r in (*point.warmups, *point.runs))
    assert set(point.answer_tokens) == {12} and not point.runs_pass_the_answer
    decode_bodies = [b for b in eos_bodies if b["max_tokens"] == 24]
    assert len(decode_bodies) >= len(point.warmups) + len(point.runs)
    assert sum("ignore_eos" not in b for b in decode_bodies) == len(point.warmups) + len(point.runs)
    assert eos.plan["decode_until"] == "eos" and "decode_until" not in fixed.plan


def test_answers_too_short_to_time_decode_on_a_server_that_cannot_go_past_them_leave_the_point_unmeasured():
    """Answers of 5 tokens are timed past the answer (ignore_eos, to 16); a server that ends them anyway leaves
    the point unmeasured, each run saying why, never a rate from 5 tokens."""
    plan = dataclasses.replace(FAKE_PLAN, prefill_tokens=(), decode_tokens=24, decode_until="eos",
                               decode_min_tokens=16)
    with PrefixCachingFakeServer(answer_tokens=5, decode_ends_after=5) as server:
        result = run_bench(plan, Endpoint(url=server.url))
    (point,) = result.decode
    assert point.valid_runs == () and point.decode_tok_per_s_client is None
    assert all(r.spec.ignore_eos for r in point.runs)
    assert set(point.invalid_reasons) == {"completion of 5 tokens, expected exactly 16 (finish_reason 'stop')"}


def test_a_server_still_loading_is_waited_for():
    """Before: bench started on a server still loading its model failed on its first request with 503."""
    with PrefixCachingFakeServer(loading_s=1.5) as server:
        result = run_bench(FAKE_PLAN, Endpoint(url=server.url))
    assert result.invalid_runs == 0 and result.prefill and result.decode


def test_a_server_that_stays_loading_is_a_clear_error():
    from bench.ladder import wait_until_loaded
    from openai_client import Client

    with PrefixCachingFakeServer(loading_s=60) as server, Client(Endpoint(url=server.url), timeout_s=5) as client:
        with pytest.raises(ServerRejected, match="HTTP 503.*loading"):
            wait_until_loaded(client, timeout_s=0.3, poll_s=0.1)
