"""Prompt-lookup drafting in the transformers engine: lossless under greedy decoding, counted honestly."""

import json

import httpx
import pytest

from serving.config import TransformersArgs
from serving.errors import ConfigError
from serving.transformers_engine import ngram_draft

# --- the lookup (pure) ---------------------------------------------------------------------------------


def test_the_draft_continues_the_latest_occurrence_of_the_longest_matching_suffix():
    #          0  1  2  3  4  5  6  7  8  9 10
    context = [5, 1, 2, 9, 7, 1, 2, 3, 4, 1, 2]
    # suffix [1, 2] occurs at 0-based 1 and 5; the latest earlier one (5) is followed by 3, 4
    assert ngram_draft(context, match_min=1, length=3) == [3, 4, 1]
    context = [1, 2, 3, 8, 2, 3, 6, 1, 2, 3]
    # [2, 3] occurs twice, [1, 2, 3] once (at 0): the longest match wins over the latest
    assert ngram_draft(context, match_min=1, length=2) == [8, 2]


def test_no_draft_below_the_minimum_match_or_without_an_earlier_occurrence():
    assert ngram_draft([1, 2, 3, 4], match_min=1, length=4) == []
    assert ngram_draft([1, 2, 9, 2], match_min=1, length=4) == [9, 2]
    assert ngram_draft([1, 2, 9, 2], match_min=2, length=4) == []
    assert ngram_draft([7], match_min=1, length=4) == []


def test_token_ids_are_matched_whole_not_by_their_bytes():
    # 256 = b"\x00\x01\x00\x00" and 1 = b"\x01\x00\x00\x00": a byte search would see [1] inside [0, 256]
    assert ngram_draft([0, 256, 5, 1], match_min=1, length=2) == []
    assert ngram_draft([1, 7, 0, 256, 5, 1], match_min=1, length=2) == [7, 0]


@pytest.mark.parametrize("args, message", [
    ({"draft_mode": "ngram"}, "ngram_match_min >= 1"),
    ({"ngram_match_min": 2}, "ngram_match_min >= 1"),
    ({"num_draft_tokens": 4}, "only with draft_mode 'ngram'"),
    ({"draft_mode": "ngram", "ngram_match_min": 1, "num_draft_tokens": 17}, "1..16"),
])
def test_bad_drafting_args_are_refused(args, message):
    with pytest.raises(ConfigError, match=message):
        TransformersArgs(**args)


# --- a real server that drafts -----------------------------------------------------------------------------

PROMPT = "Count with me: one two three four five, one two three four five, one two three four five, one two"


def _complete(server, **body):
    body = {"prompt": PROMPT, "max_tokens": 96, "temperature": 0, "ignore_eos": True, **body}
    response = httpx.post(server.url + "/v1/completions", json=body, timeout=180)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.slow
def test_greedy_output_with_drafting_equals_output_without(tiny_server, ngram_server):
    plain, drafted = _complete(tiny_server), _complete(ngram_server)
    assert drafted["choices"][0]["text"] == plain["choices"][0]["text"]
    assert drafted["usage"]["completion_tokens"] == plain["usage"]["completion_tokens"] == 96


@pytest.mark.slow
def test_usage_reports_drafted_accepted_and_rejected_tokens_only_when_drafting(tiny_server, ngram_server):
    assert "speculative" not in _complete(tiny_server)["usage"]  # no drafting is not 0 % acceptance
    spec = _complete(ngram_server)["usage"]["speculative"]
    assert spec["drafted_tokens"] == spec["accepted_tokens"] + spec["rejected_tokens"]
    assert spec["drafted_tokens"] > 0
    # at most one accepted draft per output token, the first token excepted (it comes from prefill)
    assert 0 <= spec["accepted_tokens"] <= 95


@pytest.mark.slow
def test_sampled_drafting_stays_valid_and_seeded_runs_repeat(ngram_server):
    a = _complete(ngram_server, temperature=0.8, seed=7, max_tokens=48)
    b = _complete(ngram_server, temperature=0.8, seed=7, max_tokens=48)
    assert a["choices"][0]["text"] == b["choices"][0]["text"]
    spec = a["usage"]["speculative"]
    assert spec["drafted_tokens"] == spec["accepted_tokens"] + spec["rejected_tokens"]
    assert a["usage"]["completion_tokens"] == 48


@pytest.mark.slow
def test_streamed_chat_carries_the_counts_in_its_final_usage(ngram_server):
    body = {"model": "tiny", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 32, "temperature": 0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    models = httpx.get(ngram_server.url + "/v1/models").json()
    body["model"] = models["data"][0]["id"]
    usage = None
    with httpx.stream("POST", ngram_server.url + "/v1/chat/completions", json=body, timeout=180) as response:
        for line in response.iter_lines():
            if line.startswith("data: {") and '"usage"' in line:
                chunk = json.loads(line[len("data: "):])
                usage = chunk.get("usage") or usage
    assert usage is not None and usage["completion_tokens"] == 32
    spec = usage["speculative"]
    assert spec["drafted_tokens"] == spec["accepted_tokens"] + spec["rejected_tokens"]
