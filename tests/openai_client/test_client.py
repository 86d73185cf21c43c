"""openai_client.client: request bodies, usage parsing of our server and of peers, endpoints and keys, and streams
read through a scripted loopback server (sync and async), and timed by bench (bench.timing)."""

from __future__ import annotations

import asyncio
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bench.records import RequestSpec
from bench.timing import timed_stream
from openai_client import (
    AsyncClient,
    Client,
    ClientConfigError,
    Endpoint,
    ServerUnreachable,
    build_body,
    parse_usage,
)


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
    with pytest.raises(ClientConfigError, match="http://"):
        Endpoint(url="127.0.0.1:8000")


def test_api_key_comes_from_the_file_and_never_shows_in_repr(tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text("s3cret-key\n")
    endpoint = Endpoint.from_key_file("http://127.0.0.1:1", key_file)
    assert endpoint.api_key == "s3cret-key"
    assert "s3cret" not in repr(endpoint)


def test_missing_or_empty_key_file_is_a_clear_error(tmp_path):
    with pytest.raises(ClientConfigError, match="cannot read"):
        Endpoint.from_key_file("http://127.0.0.1:1", tmp_path / "absent")
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ClientConfigError, match="empty"):
        Endpoint.from_key_file("http://127.0.0.1:1", tmp_path / "empty")


def test_api_key_never_shows_in_repr_or_str_of_an_endpoint():
    endpoint = Endpoint(url="http://127.0.0.1:1/v1", model="m", api_key="s3cret-key")
    assert "s3cret" not in repr(endpoint) and "s3cret" not in str(endpoint)
    assert endpoint.v1_url == "http://127.0.0.1:1/v1"


class ScriptedSSEServer:
    """A loopback server at the outside boundary: answers every POST with `raw` bytes as an event stream,
    GET /v1/models with one model, and 404 elsewhere; records the Authorization headers it saw."""

    def __init__(self, raw: bytes, status: int = 200):
        self.raw, self.status, self.auth = raw, status, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # the body ends when the connection closes

            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                outer.auth.append(self.headers.get("Authorization"))
                self.send_response(outer.status)
                self.send_header("Content-Type", "text/event-stream" if outer.status == 200 else "application/json")
                self.end_headers()
                self.wfile.write(outer.raw)

            def do_GET(self):
                found = self.path == "/v1/models"
                self.send_response(200 if found else 404)
                self.end_headers()
                self.wfile.write(b'{"object": "list", "data": [{"id": "tiny"}]}' if found else b"{}")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


SPEC = RequestSpec(
    purpose="probe", point="probe", prompt_kind="mixed", target_prompt_tokens=None, prompt_chars=2,
    prompt_sha256="0", max_tokens=4, ignore_eos=False,
)
CHUNK = 'data: {"choices": [{"index": 0, "delta": {"content": "%s"}, "finish_reason": %s}]}\r\n\r\n'
USAGE = 'data: {"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 3}}\r\n\r\n'


def test_a_crlf_stream_with_comments_is_timed_and_its_usage_read():
    raw = ": ping\r\n\r\n" + CHUNK % ("a", "null") + CHUNK % ("b", "null") + CHUNK % ("c", '"stop"') + USAGE
    with ScriptedSSEServer((raw + "data: [DONE]\r\n\r\n").encode()) as server:
        with Client(Endpoint(url=server.url, api_key="k"), timeout_s=10) as client:
            result = timed_stream(client, SPEC, {}, "/v1/chat/completions")
            assert client.served_model() == "tiny" and client.server_info() is None and client.health() is False
    assert result.ok and (result.text_chunks, result.finish_reason, result.completion_tokens) == (3, "stop", 3)
    assert len(result.itl_s) == 2 and server.auth == ["Bearer k"]


def test_an_error_object_mid_stream_is_a_failed_request_not_an_exception():
    raw = CHUNK % ("a", "null") + 'data: {"error": {"message": "engine died"}}\n\n'
    with ScriptedSSEServer(raw.encode()) as server, Client(Endpoint(url=server.url), timeout_s=10) as client:
        result = timed_stream(client, SPEC, {}, "/v1/chat/completions")
    assert (result.ok, result.http_status) == (False, 200) and "engine died" in result.error


def test_an_error_status_is_a_failed_request_with_the_servers_message():
    raw = b'{"error": {"message": "max_tokens too large"}}'
    with ScriptedSSEServer(raw, status=400) as server, Client(Endpoint(url=server.url), timeout_s=10) as client:
        result = timed_stream(client, SPEC, {}, "/v1/chat/completions")
    assert (result.ok, result.http_status, result.error) == (False, 400, "HTTP 400: max_tokens too large")


def test_a_refused_connection_is_a_transport_failure():
    with Client(Endpoint(url="http://127.0.0.1:9"), timeout_s=5) as client:
        result = timed_stream(client, SPEC, {}, "/v1/chat/completions")
        with pytest.raises(ServerUnreachable):
            client.served_model()
    assert (result.ok, result.http_status) == (False, None) and result.error.startswith("transport: ConnectError")


def test_the_async_client_reads_the_same_stream_and_says_when_it_was_cut_before_done():
    async def read(raw: str) -> tuple[list[dict], bool]:
        with ScriptedSSEServer(raw.encode()) as server:
            async with AsyncClient(Endpoint(url=server.url, api_key="s"), timeout_s=10) as client:
                async with client.open_stream("/v1/chat/completions", {}) as stream:
                    chunks = [event.chunk async for event in stream]
                    return chunks, stream.done

    chunks, done = asyncio.run(read(CHUNK % ("a", "null") + USAGE + "data: [DONE]\n\n"))
    assert (len(chunks), done) == (2, True) and chunks[1]["usage"]["completion_tokens"] == 3
    chunks, done = asyncio.run(read(CHUNK % ("a", "null")))
    assert (len(chunks), done) == (1, False)
