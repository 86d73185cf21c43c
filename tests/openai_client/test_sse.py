"""openai_client.sse: the one SSE reader, on the edge cases servers produce (comments, CRLF, multi-line data,
a stream cut before [DONE], an error object mid-stream)."""

from __future__ import annotations

import pytest

from openai_client.errors import StreamError
from openai_client.sse import SSEDecoder


def _decode(text: str) -> tuple[list[dict], bool]:
    """Feed `text` line by line as httpx's iter_lines would (line endings kept or not), then close."""
    decoder = SSEDecoder()
    chunks = []
    for line in text.splitlines(keepends=True):
        if event := decoder.feed(line):
            chunks.append(event.chunk)
        if decoder.done:
            break
    if last := decoder.close():
        chunks.append(last.chunk)
    return chunks, decoder.done


def test_plain_openai_stream_gives_its_chunks_and_ends_at_done():
    chunks, done = _decode('data: {"a": 1}\n\ndata: {"a": 2}\n\ndata: [DONE]\n\n')
    assert (chunks, done) == ([{"a": 1}, {"a": 2}], True)


def test_comments_and_other_fields_are_ignored():
    text = ': keep-alive\n\nevent: message\nid: 7\nretry: 100\ndata: {"a": 1}\n\n: ping\n\ndata: [DONE]\n\n'
    assert _decode(text) == ([{"a": 1}], True)


def test_crlf_line_endings_as_sse_starlette_writes_them():
    assert _decode('data: {"a": 1}\r\n\r\ndata: [DONE]\r\n\r\n') == ([{"a": 1}], True)


def test_multi_line_data_is_one_event_joined_by_newlines():
    chunks, _ = _decode('data: {"a":\ndata: 1,\ndata:"b": 2}\n\ndata: [DONE]\n\n')
    assert chunks == [{"a": 1, "b": 2}]


def test_a_stream_cut_before_done_is_not_done_and_keeps_what_it_sent():
    assert _decode('data: {"a": 1}\n\ndata: {"a": 2}\n\n') == ([{"a": 1}, {"a": 2}], False)


def test_a_last_event_without_its_blank_line_still_counts():
    assert _decode('data: {"a": 1}\n\ndata: [DONE]') == ([{"a": 1}], True)
    assert _decode('data: {"a": 1}') == ([{"a": 1}], False)


def test_lines_after_done_are_ignored():
    decoder = SSEDecoder()
    for line in ("data: [DONE]", "", 'data: {"late": 1}', ""):
        assert decoder.feed(line) is None
    assert decoder.done and decoder.close() is None


def test_an_error_object_mid_stream_raises_with_the_servers_message():
    text = 'data: {"a": 1}\n\ndata: {"error": {"message": "CUDA out of memory", "code": 500}}\n\n'
    with pytest.raises(StreamError, match="CUDA out of memory"):
        _decode(text)


def test_a_stream_cut_inside_an_event_is_a_stream_error():
    with pytest.raises(StreamError, match="not JSON"):
        _decode('data: {"a": 1}\n\ndata: {"choi')


def test_an_event_that_is_not_an_object_is_a_stream_error():
    with pytest.raises(StreamError, match="list"):
        _decode("data: [1, 2]\n\n")


def test_the_event_time_is_when_its_first_line_came():
    decoder = SSEDecoder()
    assert decoder.feed(": ping", 0.5) is None
    assert decoder.feed('data: {"a":', 1.0) is None
    assert decoder.feed("data: 1}", 2.0) is None
    event = decoder.feed("", 3.0)
    assert event is not None and (event.received_at, event.chunk) == (1.0, {"a": 1})
