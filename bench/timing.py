"""One streamed request, timed as the client sees it: the `RequestResult` every bench run is made of.

The transport is the project's one client (`openai_client`); what bench adds is the clock: when the
first text arrived, the gaps between text chunks, when finish_reason came, and the usage the server
reported. A failed request is data, never an exception.

Usage:
    with Client(endpoint, timeout_s=600) as client:
        result = timed_stream(client, spec, body, "/v1/chat/completions")   # never raises
"""

from __future__ import annotations

import time
from typing import Any

from bench.records import RequestResult, RequestSpec
from openai_client import (
    Client,
    ServerRejected,
    ServerUnreachable,
    SSEEvent,
    StreamError,
    chunk_text,
    parse_usage,
)

__all__ = ["timed_stream"]


def timed_stream(client: Client, spec: RequestSpec, body: dict[str, Any], path: str) -> RequestResult:
    """Send one streaming request and time it; failures come back as ok=False results."""
    timeline = _Timeline(spec)
    try:
        with client.open_stream(path, body) as events:
            for event in events:
                timeline.add(event)
    except ServerRejected as exc:
        return timeline.failed(f"HTTP {exc.status}: {exc.detail}", http_status=exc.status)
    except ServerUnreachable as exc:
        cause = exc.__cause__
        return timeline.failed(f"transport: {type(cause).__name__}: {cause}", http_status=None)
    except StreamError as exc:
        return timeline.failed(f"stream: {exc}", http_status=200)
    return timeline.result()


class _Timeline:
    """What the client saw of one stream, timed from the moment it was created (just before sending)."""

    def __init__(self, spec: RequestSpec):
        self.spec = spec
        self.started_unix = time.time()
        self.t0 = time.perf_counter()
        self.fields: dict[str, Any] = {}
        self.token_times: list[float] = []
        self.finish_at: float | None = None
        self.finish_reason: str | None = None

    def add(self, event: SSEEvent) -> None:
        now = event.received_at - self.t0
        text, finish = chunk_text(event.chunk)
        self.fields.update(parse_usage(event.chunk))
        if text:
            self.token_times.append(now)
        if finish and self.finish_at is None:
            self.finish_at, self.finish_reason = now, finish

    def failed(self, error: str, *, http_status: int | None) -> RequestResult:
        return RequestResult(
            spec=self.spec,
            ok=False,
            error=error,
            http_status=http_status,
            started_at_unix_s=self.started_unix,
            latency_s=time.perf_counter() - self.t0,
        )

    def result(self) -> RequestResult:
        times = self.token_times
        return RequestResult(
            spec=self.spec,
            ok=True,
            http_status=200,
            started_at_unix_s=self.started_unix,
            latency_s=time.perf_counter() - self.t0,
            ttft_s=times[0] if times else None,
            finish_s=self.finish_at,
            itl_s=tuple(round(b - a, 6) for a, b in zip(times, times[1:], strict=False)),
            text_chunks=len(times),
            finish_reason=self.finish_reason,
            **self.fields,
        )
