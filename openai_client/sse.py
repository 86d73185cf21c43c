"""The project's one reader of OpenAI-style server-sent events: lines in, JSON chunks out.

It follows the event-stream rules (WHATWG HTML, "Server-sent events") that OpenAI-compatible servers
rely on: an event is the `data:` lines up to a blank line, joined by newlines; lines starting with
`:` are comments (keep-alives); `event:`, `id:`, `retry:` and unknown fields carry nothing we read;
a trailing CR is dropped (sse-starlette, used by TabbyAPI, ends lines with CRLF). `data: [DONE]`
ends the stream. Unlike the standard, a last event that the stream ends without a blank line after
still counts, so a server that closes right after its last `data:` line loses nothing.

Usage:
    decoder = SSEDecoder()
    for line in response.iter_lines():
        event = decoder.feed(line, time.perf_counter())
        if event is not None:
            use(event.chunk)                 # a dict; event.received_at: when its first line came
        if decoder.done:
            break
    last = decoder.close()                   # a final event not closed by a blank line, if any
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from openai_client.errors import StreamError

__all__ = ["DONE", "SSEDecoder", "SSEEvent"]

DONE = "[DONE]"


class SSEEvent(NamedTuple):
    """One decoded chunk and the time (the caller's clock) at which the event's first line arrived."""

    received_at: float
    chunk: dict[str, Any]


class SSEDecoder:
    """Feed it one line at a time; it returns an event when a blank line completes one.

    `done` turns true at `data: [DONE]`; lines fed after it are ignored.
    """

    def __init__(self) -> None:
        self._data: list[str] = []
        self._received_at = 0.0
        self.done = False

    def feed(self, line: str, now: float = 0.0) -> SSEEvent | None:
        """One line of the stream (with or without its line ending).

        Raises:
            StreamError: an event is not a JSON object, or it is an OpenAI error object.
        """
        if self.done:
            return None
        line = line.rstrip("\r\n")
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None  # a comment: servers send these as keep-alives
        name, _, value = line.partition(":")
        if name == "data":
            if not self._data:
                self._received_at = now  # an event's time is when its first line came
            self._data.append(value.removeprefix(" "))
        return None

    def close(self) -> SSEEvent | None:
        """The stream has ended: the last event, if a blank line did not already complete it.

        Raises:
            StreamError: as `feed`.
        """
        return None if self.done else self._dispatch()

    def _dispatch(self) -> SSEEvent | None:
        if not self._data:
            return None
        data = "\n".join(self._data)
        self._data = []
        if data.strip() == DONE:
            self.done = True
            return None
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError as exc:
            raise StreamError(f"a stream event is not JSON ({exc}): {data[:200]!r}") from exc
        if not isinstance(chunk, dict):
            raise StreamError(
                f"a stream event is {type(chunk).__name__}, expected a JSON object: {data[:200]!r}"
            )
        if chunk.get("error"):
            raise StreamError(f"the server reported an error mid-stream: {_error_text(chunk['error'])}")
        return SSEEvent(self._received_at, chunk)


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error)
