"""The project's one client for OpenAI-compatible servers, and its one `Endpoint` type.

It talks to any OpenAI-compatible server (this project's, TabbyAPI, vLLM, llama.cpp, `transformers
serve`): nothing server-specific is required. Requests are plain OpenAI plus the optional fields a
caller chooses; usage extensions are read where present (`parse_usage`):
`prompt_tokens_details.cached_tokens`, `timings.{queue_s,prefill_s,decode_s}` and
`speculative.{accepted_tokens,rejected_tokens}` (this project's server), or llama.cpp's top-level
`timings.{prompt_ms,predicted_ms,cache_n}`. `/v1/server_info` and `/health` are optional: a server
without them answers None and False. Streams are read by `openai_client.sse.SSEDecoder`, the one SSE
parser. The sync and async clients share the request building, the error mapping and the usage
parsing here, so the one client has one surface; timing a stream is bench's (`bench.timing`).

Usage:
    endpoint = Endpoint.from_key_file("http://127.0.0.1:18020/v1", Path("key.txt"))  # url: the root
    with Client(endpoint, timeout_s=600) as client:
        model = client.served_model()            # endpoint.model, else the first /v1/models lists
        info = client.server_info()              # None where the server has no /v1/server_info
        answer = client.post_json("/v1/completions", body)
        with client.open_stream("/v1/chat/completions", body) as stream:
            for event in stream: ...             # SSEEvent(received_at, chunk); stream.done at [DONE]
    async with AsyncClient(endpoint, timeout_s=600) as client:   # the same stream, for asyncio callers
        async with client.open_stream("/v1/chat/completions", body) as stream:
            async for event in stream: ...
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx

from openai_client.errors import (
    ClientConfigError,
    ProtocolError,
    ServerRejected,
    ServerUnreachable,
)
from openai_client.sse import SSEDecoder, SSEEvent

__all__ = ["Api", "AsyncClient", "Client", "Endpoint", "EventStream", "build_body", "chunk_text", "parse_usage"]

Api = Literal["chat", "completions"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class Endpoint:
    """Where the server is: its root URL (given with or without /v1), a model, and a key kept out of repr.

    The key is never shown in repr, logs or results; do not pass an Endpoint to `dataclasses.asdict`
    for anything that is written.
    """

    url: str
    model: str | None = None  # None: the first model /v1/models lists
    api_key: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise ClientConfigError(f"the server URL must start with http:// or https://, got {self.url!r}")
        object.__setattr__(self, "url", self.url.rstrip("/").removesuffix("/v1"))

    @property
    def v1_url(self) -> str:
        """The OpenAI base URL (root + /v1), as OpenAI SDK-style clients want it."""
        return self.url + "/v1"

    @classmethod
    def from_key_file(cls, url: str, key_file: Path | None, model: str | None = None) -> Endpoint:
        """Read the API key from a file (first line, stripped).

        Raises:
            ClientConfigError: the file cannot be read or is empty.
        """
        if key_file is None:
            return cls(url=url, model=model)
        try:
            key = key_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ClientConfigError(f"cannot read --api-key-file {key_file}: {exc.strerror}") from exc
        if not key:
            raise ClientConfigError(f"--api-key-file {key_file} is empty")
        return cls(url=url, api_key=key, model=model)


def build_body(
    *,
    api: Api,
    model: str,
    text: str,
    max_tokens: int,
    ignore_eos: bool,
    stream_options: bool,
    stream: bool = True,
    extra: dict[str, Any] | None = None,
    system: str | None = None,
) -> dict[str, Any]:
    """A greedy request for `text`, with only the optional fields the server accepts, plus `extra`.

    `system`: a system message before it (chat), or text before it (completions, which has no roles).
    """
    body: dict[str, Any] = {**(extra or {}), "model": model, "max_tokens": max_tokens, "temperature": 0}
    body["stream"] = stream
    if api == "chat":
        system_message = [{"role": "system", "content": system}] if system is not None else []
        body["messages"] = [*system_message, {"role": "user", "content": text}]
    else:
        body["prompt"] = text if system is None else f"{system}\n\n{text}"
    if ignore_eos:
        body["ignore_eos"] = True
    if stream and stream_options:
        body["stream_options"] = {"include_usage": True}
    return body


def parse_usage(chunk: dict[str, Any]) -> dict[str, Any]:
    """What a chunk's usage (and llama.cpp's timings) reports, where present, named as bench's RequestResult fields."""
    out: dict[str, Any] = {}
    usage = chunk.get("usage")
    if isinstance(usage, dict):
        out["prompt_tokens"] = usage.get("prompt_tokens")
        out["completion_tokens"] = usage.get("completion_tokens")
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict) and details.get("cached_tokens") is not None:
            out["cached_tokens"] = details["cached_tokens"]
        timings = usage.get("timings")
        if isinstance(timings, dict):
            out["server_queue_s"] = timings.get("queue_s")
            out["server_prefill_s"] = timings.get("prefill_s")
            out["server_decode_s"] = timings.get("decode_s")
        spec = usage.get("speculative")
        if isinstance(spec, dict):
            accepted, rejected, drafted = (spec.get(k) for k in ("accepted_tokens", "rejected_tokens", "drafted_tokens"))
            if rejected is None and isinstance(drafted, int) and isinstance(accepted, int):
                rejected = drafted - accepted  # every drafted token is accepted or rejected
            out["spec_accepted_tokens"] = accepted
            out["spec_rejected_tokens"] = rejected
    timings = chunk.get("timings")  # llama.cpp server
    if isinstance(timings, dict) and "prompt_ms" in timings:
        out["server_prefill_s"] = timings["prompt_ms"] / 1000
        out["server_decode_s"] = timings.get("predicted_ms", 0) / 1000 or None
        if timings.get("cache_n") is not None:
            out["cached_tokens"] = timings["cache_n"]
    return {k: v for k, v in out.items() if v is not None}


def chunk_text(chunk: dict[str, Any]) -> tuple[str, str | None]:
    """(generated text, finish_reason) of one chunk, for chat and completions alike."""
    choices = chunk.get("choices") or []
    if not choices:
        return "", None
    choice = choices[0]
    delta = choice.get("delta") or {}
    text = "".join(
        v
        for v in (
            delta.get("content"),
            delta.get("reasoning_content"),
            delta.get("reasoning"),
            choice.get("text"),
        )
        if isinstance(v, str)
    )
    return text, choice.get("finish_reason")


def _error_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:500]
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        return str(err.get("message") or err)
    if err is not None:
        return str(err)
    if isinstance(body, dict) and "detail" in body:
        return str(body["detail"])
    return json.dumps(body)[:500]


def _rejected(method: str, path: str, response: httpx.Response) -> ServerRejected:
    hint = " (check --api-key-file)" if response.status_code in (401, 403) else ""
    detail = _error_message(response)
    return ServerRejected(
        f"{method} {path} answered HTTP {response.status_code}{hint}: {detail}",
        status=response.status_code,
        detail=detail,
    )


def _unreachable(method: str, url: str, exc: httpx.TransportError) -> ServerUnreachable:
    return ServerUnreachable(f"{method} {url} failed: {type(exc).__name__}: {exc}")


def _http_options(endpoint: Endpoint, timeout_s: float, connect_timeout_s: float) -> dict[str, Any]:
    """The one httpx set-up of both clients: the root as base URL and the key as a Bearer header."""
    headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
    return {
        "base_url": endpoint.url,
        "headers": headers,
        "timeout": httpx.Timeout(timeout_s, connect=connect_timeout_s),
    }


class EventStream:
    """The events of one open stream: iterate it (sync or async, as its client); `done` after [DONE]."""

    def __init__(self, response: httpx.Response):
        self._response = response
        self._decoder = SSEDecoder()

    @property
    def done(self) -> bool:
        return self._decoder.done

    def __iter__(self) -> Iterator[SSEEvent]:
        for line in self._response.iter_lines():
            yield from self._on_line(line)
            if self._decoder.done:
                return
        yield from self._on_end()

    async def __aiter__(self) -> AsyncIterator[SSEEvent]:
        async for line in self._response.aiter_lines():
            for event in self._on_line(line):  # the decoding is shared; only the reading differs
                yield event
            if self._decoder.done:
                return
        for event in self._on_end():
            yield event

    def _on_line(self, line: str) -> tuple[SSEEvent, ...]:
        event = self._decoder.feed(line, time.perf_counter())
        return (event,) if event else ()

    def _on_end(self) -> tuple[SSEEvent, ...]:
        event = self._decoder.close()
        return (event,) if event else ()


class Client:
    """An httpx client bound to one endpoint; set-up calls raise, measured calls (`stream`) return data."""

    def __init__(self, endpoint: Endpoint, *, timeout_s: float, connect_timeout_s: float = 10.0):
        self.endpoint = endpoint
        self._http = httpx.Client(**_http_options(endpoint, timeout_s, connect_timeout_s))

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def get_json(self, path: str, *, missing_ok: bool = False) -> dict[str, Any] | None:
        """GET a JSON document; with `missing_ok`, a 404/405 (endpoint absent) gives None.

        Raises:
            ServerUnreachable, ServerRejected, ProtocolError.
        """
        try:
            response = self._http.get(path)
        except httpx.TransportError as exc:
            raise _unreachable("GET", self.endpoint.url + path, exc) from exc
        if missing_ok and response.status_code in (404, 405):
            return None
        return self._json_or_raise("GET", path, response)

    def post_json(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST and return the JSON answer (a non-streaming request).

        Raises:
            ServerUnreachable, ServerRejected, ProtocolError.
        """
        try:
            response = self._http.post(path, json=body)
        except httpx.TransportError as exc:
            raise _unreachable("POST", self.endpoint.url + path, exc) from exc
        return self._json_or_raise("POST", path, response)

    def models(self) -> list[dict[str, Any]]:
        """The entries of /v1/models (each has an "id").

        Raises:
            ServerUnreachable, ServerRejected, ProtocolError: also when it lists no model.
        """
        models = self.get_json("/v1/models") or {}
        data = models.get("data")
        if not isinstance(data, list) or not data or not all(isinstance(m, dict) and "id" in m for m in data):
            raise ProtocolError(f"GET /v1/models listed no models: {models!r:.200}")
        return data

    def served_model(self) -> str:
        """The endpoint's model where it names one, else the first model /v1/models lists.

        Raises:
            ServerUnreachable, ServerRejected, ProtocolError.
        """
        return self.endpoint.model or str(self.models()[0]["id"])

    def server_info(self) -> dict[str, Any] | None:
        """/v1/server_info (this project's server: engine, versions, config, memory); None where absent.

        Raises:
            ServerUnreachable, ServerRejected, ProtocolError.
        """
        return self.get_json("/v1/server_info", missing_ok=True)

    def health(self) -> bool:
        """Whether GET /health answers 200 (a server without /health answers False).

        Raises:
            ServerUnreachable.
        """
        try:
            return self._http.get("/health").status_code == 200
        except httpx.TransportError as exc:
            raise _unreachable("GET", self.endpoint.url + "/health", exc) from exc

    def _json_or_raise(self, method: str, path: str, response: httpx.Response) -> dict[str, Any]:
        if response.status_code >= 400:
            raise _rejected(method, path, response)
        try:
            data = response.json()
        except ValueError as exc:
            raise ProtocolError(f"{method} {path} answered non-JSON: {response.text[:200]!r}") from exc
        if not isinstance(data, dict):
            raise ProtocolError(f"{method} {path} answered {type(data).__name__}, expected a JSON object")
        return data

    @contextlib.contextmanager
    def open_stream(self, path: str, body: dict[str, Any]) -> Iterator[EventStream]:
        """POST a streaming request and give its events; the response closes when the block ends.

        Raises:
            ServerUnreachable: no answer, or the connection broke mid-stream.
            ServerRejected: an answer other than 200 (its body has been read).
            StreamError: while iterating, an error event or an event that is not a JSON object.
        """
        try:
            with self._http.stream("POST", path, json=body) as response:
                if response.status_code != 200:
                    response.read()
                    raise _rejected("POST", path, response)
                yield EventStream(response)
        except httpx.TransportError as exc:
            raise _unreachable("POST", self.endpoint.url + path, exc) from exc


class AsyncClient:
    """The asyncio twin of `Client` for streaming (eval's verifiers harness runs in an event loop)."""

    def __init__(self, endpoint: Endpoint, *, timeout_s: float, connect_timeout_s: float = 10.0):
        self.endpoint = endpoint
        self._http = httpx.AsyncClient(**_http_options(endpoint, timeout_s, connect_timeout_s))

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    @contextlib.asynccontextmanager
    async def open_stream(self, path: str, body: dict[str, Any]) -> AsyncIterator[EventStream]:
        """As `Client.open_stream`; iterate the stream with `async for`.

        Raises:
            ServerUnreachable, ServerRejected, StreamError: as `Client.open_stream`.
        """
        try:
            async with self._http.stream("POST", path, json=body) as response:
                if response.status_code != 200:
                    await response.aread()
                    raise _rejected("POST", path, response)
                yield EventStream(response)
        except httpx.TransportError as exc:
            raise _unreachable("POST", self.endpoint.url + path, exc) from exc
