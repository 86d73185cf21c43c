"""How long a point is measured: until its interval meets its target and its runs stop trending, or its share of
the bench's time is spent; early runs of a trend are warm-ups after all; answers too short to time decode are
timed on runs continued past them. Against `fakes.PrefixCachingFakeServer` over real HTTP, its token gaps
scripted by request number."""

from __future__ import annotations

import dataclasses

import pytest

from bench import BenchPlan, run_bench
from bench.ladder import trending
from openai_client import Endpoint
from tests.bench.fakes import PrefixCachingFakeServer

# one decode point, short runs; a 30% target, so the loaded machine's timer jitter is no trend and no spread
PLAN = BenchPlan(prefill_tokens=(), decode_context_tokens=(64,), decode_kinds=("math",), decode_tokens=8,
                 min_repeats=3, max_repeats=4, warmup_requests=0, decode_target_rel_ci=0.3, gpu_index=None)
# a GPU heating up that never settles: each request decodes 30% slower than the one before (gaps of 5 ms and
# more: a loopback stream's chunks arrive apart), against a 10% target
HEATING = dataclasses.replace(PLAN, decode_target_rel_ci=0.1)


def heating(post: int) -> float:
    return 0.005 * 1.3 ** post


def test_a_trend_beyond_the_target_is_a_trend_and_a_wobble_is_not():
    assert trending([100, 100, 100, 200, 200, 200], 0.05) == pytest.approx(1.0)
    assert trending([100, 101, 99, 100, 102, 100], 0.05) is None
    assert trending([100, 130, 160], 0.05) == pytest.approx(0.6)  # three runs moving one way, far
    assert trending([100, 130, 110], 0.05) is None and trending([100, 150], 0.05) is None  # no trend, too few


def test_a_point_whose_runs_keep_trending_is_not_steady_and_its_time_left_is_not_ended_by_a_count():
    """Every request decodes slower than the one before (a GPU heating up that never settles): the point runs on
    past max_repeats while its time share lasts, sets its early runs aside as warm-up, and is not counted settled."""
    plan = dataclasses.replace(HEATING, bench_time_s=2.5)
    with PrefixCachingFakeServer(token_gap_s=heating) as server:
        point = run_bench(plan, Endpoint(url=server.url)).decode[0]
    set_aside = [r for r in point.warmups if (r.invalid_reason or "").startswith("warm-up: the point's runs still")]
    assert len(point.runs) + len(set_aside) > plan.max_repeats
    assert not point.settled and set_aside
    assert point.invalid_reasons == ()  # warm-ups after all are warm-ups, not invalid runs


def test_a_warm_up_trend_that_ends_leaves_a_steady_point():
    """The first requests decode 4x slower (a cold GPU), then steady: those runs are set aside as warm-up and the
    point settles on the steady ones."""
    plan = dataclasses.replace(PLAN, bench_time_s=6.0)
    with PrefixCachingFakeServer(token_gap_s=lambda post: 0.024 if post <= 4 else 0.006) as server:
        point = run_bench(plan, Endpoint(url=server.url)).decode[0]
    assert point.settled
    assert sum((r.invalid_reason or "").startswith("warm-up:") for r in point.warmups) >= 1
    assert point.decode_tok_per_s_client.median > 70  # the steady runs' (6 ms a token), not the cold ones' (24 ms)


def test_without_a_time_share_the_count_ends_a_point_as_before():
    with PrefixCachingFakeServer(token_gap_s=heating) as server:
        point = run_bench(HEATING, Endpoint(url=server.url)).decode[0]
    assert len(point.runs) == HEATING.max_repeats and not point.settled


def test_answers_too_short_to_time_decode_are_timed_past_the_answer_and_weighed_by_their_own_length():
    """The model answers in 2 tokens (rg-logic's): its runs go on to decode_min_tokens past the answer, each valid,
    and the point's answer length stays the model's own (what request time weighs it by)."""
    plan = dataclasses.replace(PLAN, decode_tokens=16, decode_until="eos", decode_min_tokens=8, max_repeats=8)
    with PrefixCachingFakeServer(answer_tokens=2, token_gap_s=lambda _post: 0.005) as server:
        point = run_bench(plan, Endpoint(url=server.url)).decode[0]
    assert {r.completion_tokens for r in point.valid_runs} == {8} and len(point.valid_runs) >= plan.min_repeats
    assert all(r.spec.ignore_eos for r in point.runs)
    assert point.answer_tokens_median == 2


def test_a_long_first_answer_does_not_leave_a_point_of_short_answers_unmeasured():
    """The real 0.5B's rg-logic@8192 on the H200 (2026-12-04): its one warm-up answered long, so the runs timed the
    model's own answers, and they answered 2 tokens: 12 runs, none timeable, the baseline unmeasured. Now the point
    switches to runs past the answer once most of its runs end too short."""
    plan = dataclasses.replace(PLAN, decode_tokens=16, decode_until="eos", decode_min_tokens=8, max_repeats=8)
    with PrefixCachingFakeServer(answers=lambda post: 16 if post <= 3 else 2, token_gap_s=lambda _post: 0.005) as server:
        point = run_bench(plan, Endpoint(url=server.url)).decode[0]
    assert len(point.valid_runs) >= plan.min_repeats
    assert {r.completion_tokens for r in point.valid_runs} == {8} and point.runs[-1].spec.ignore_eos
