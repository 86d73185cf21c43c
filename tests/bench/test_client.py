"""bench.client: request bodies, usage parsing of our server and of peers, endpoints and keys."""

from __future__ import annotations

import pytest

from bench.client import Endpoint, build_body, parse_usage
from bench.errors import BenchConfigError


def test_chat_body_is_greedy_streaming_with_usage_and_ignore_eos():
    body = build_body(api="chat", model="m", text="hi", max_tokens=8, ignore_eos=True, stream_options=True)
    assert body == {
        "model": "m",
        "max_tokens": 8,
        "temperature": 0,
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
    }


def test_fields_a_server_refused_are_left_out():
    body = build_body(
        api="completions", model="m", text="hi", max_tokens=8, ignore_eos=False, stream_options=False
    )
    assert "ignore_eos" not in body and "stream_options" not in body
    assert body["prompt"] == "hi"


def test_usage_extensions_of_this_projects_server_are_read():
    chunk = {
        "choices": [],
        "usage": {
            "prompt_tokens": 8200,
            "completion_tokens": 1,
            "prompt_tokens_details": {"cached_tokens": 0},
            "timings": {"queue_s": 0.001, "prefill_s": 1.2, "decode_s": 0.0},
            "speculative": {"accepted_tokens": 30, "rejected_tokens": 10},
        },
    }
    assert parse_usage(chunk) == {
        "prompt_tokens": 8200,
        "completion_tokens": 1,
        "cached_tokens": 0,
        "server_queue_s": 0.001,
        "server_prefill_s": 1.2,
        "server_decode_s": 0.0,
        "spec_accepted_tokens": 30,
        "spec_rejected_tokens": 10,
    }


def test_a_drafted_count_without_rejections_is_read_as_drafted_minus_accepted():
    usage = {"prompt_tokens": 5, "completion_tokens": 9, "speculative": {"drafted_tokens": 12, "accepted_tokens": 7}}
    parsed = parse_usage({"usage": usage})
    assert (parsed["spec_accepted_tokens"], parsed["spec_rejected_tokens"]) == (7, 5)


def test_plain_openai_usage_has_no_extensions():
    assert parse_usage({"usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}) == {
        "prompt_tokens": 5,
        "completion_tokens": 2,
    }


def test_llama_cpp_timings_are_read():
    chunk = {"timings": {"prompt_n": 1000, "prompt_ms": 250.0, "predicted_ms": 1000.0, "cache_n": 0}}
    assert parse_usage(chunk) == {"server_prefill_s": 0.25, "server_decode_s": 1.0, "cached_tokens": 0}


def test_a_chunk_without_usage_yields_nothing():
    assert parse_usage({"choices": [{"delta": {"content": "x"}}]}) == {}


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000",
        "http://127.0.0.1:8000/",
        "http://127.0.0.1:8000/v1",
        "http://127.0.0.1:8000/v1/",
    ],
)
def test_endpoint_url_is_normalized_to_the_base(url):
    assert Endpoint(url=url).url == "http://127.0.0.1:8000"


def test_endpoint_refuses_a_url_without_scheme():
    with pytest.raises(BenchConfigError, match="http://"):
        Endpoint(url="127.0.0.1:8000")


def test_api_key_comes_from_the_file_and_never_shows_in_repr(tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text("s3cret-key\n")
    endpoint = Endpoint.from_key_file("http://127.0.0.1:1", key_file)
    assert endpoint.api_key == "s3cret-key"
    assert "s3cret" not in repr(endpoint)


def test_missing_or_empty_key_file_is_a_clear_error(tmp_path):
    with pytest.raises(BenchConfigError, match="cannot read"):
        Endpoint.from_key_file("http://127.0.0.1:1", tmp_path / "absent")
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(BenchConfigError, match="empty"):
        Endpoint.from_key_file("http://127.0.0.1:1", tmp_path / "empty")
