"""Draft acceptance end to end: a real server drafting by prompt lookup, bench's records, its report."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from bench import BenchPlan, run_bench
from bench.records import BenchResult
from bench.report import render, summary_lines
from bench.stats import compare
from openai_client import Endpoint

pytestmark = pytest.mark.slow

PLAN = BenchPlan(
    prefill_tokens=(),
    decode_context_tokens=(256,),
    decode_kinds=("math", "code"),
    decode_tokens=48,
    min_repeats=3,
    max_repeats=3,
    warmup_requests=1,
    gpu_index=None,
)


@pytest.fixture(scope="module")
def drafted(ngram_server) -> BenchResult:
    return run_bench(PLAN, Endpoint(url=ngram_server.url))


def test_each_decode_point_stores_drafted_and_accepted_tokens_from_the_server(drafted):
    assert drafted.server.reports_speculative
    for point in drafted.decode:
        runs = point.valid_runs
        assert len(runs) >= PLAN.min_repeats, point.invalid_reasons
        assert all(r.spec_drafted_tokens == r.spec_accepted_tokens + r.spec_rejected_tokens for r in runs)
        assert point.spec_drafted_tokens == sum(r.spec_drafted_tokens for r in runs) > 0
        assert point.spec_accepted_tokens == sum(r.spec_accepted_tokens for r in runs)
        assert point.spec_acceptance == point.spec_accepted_tokens / point.spec_drafted_tokens
        assert point.spec_accepted_per_token == point.spec_accepted_tokens / (len(runs) * PLAN.decode_tokens)


def test_acceptance_is_stored_with_the_record_and_read_back(drafted):
    row = json.loads(json.dumps(drafted.to_dict()))
    assert row["acceptance"] == drafted.acceptance()
    assert set(row["acceptance"]) == {"spec_acceptance@256/math", "spec_acceptance@256/code"}
    stored = row["decode"][0]
    assert stored["spec_drafted_tokens"] == drafted.decode[0].spec_drafted_tokens
    assert stored["runs"][0]["spec_accepted_tokens"] is not None
    back = BenchResult.from_dict(row)
    assert back == drafted and back.acceptance() == drafted.acceptance()


def test_the_report_shows_acceptance_and_grep_lines_carry_it(drafted):
    console = Console(record=True, width=200)
    render(drafted, console)
    point = drafted.decode[0]
    assert f"({point.spec_accepted_tokens:,}/{point.spec_drafted_tokens:,})" in console.export_text()
    lines = summary_lines(drafted)
    assert any(line.startswith("spec_acceptance@256/math: ") for line in lines)


def test_a_server_that_does_not_draft_has_no_acceptance_and_compares_on_speed_alone(drafted, tiny_server):
    plain = run_bench(PLAN, Endpoint(url=tiny_server.url))
    assert plain.server.reports_speculative is False
    assert all(d.spec_drafted_tokens is None and d.spec_acceptance is None for d in plain.decode)
    assert plain.acceptance() == {}
    # acceptance is not a metric of samples(): comparing a drafting candidate with a plain baseline works
    verdicts = compare(plain.samples(), drafted.samples(), noise_floor=None)
    assert {c.metric for c in verdicts} == set(plain.samples())
