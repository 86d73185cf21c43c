"""One streamed OpenAI request over httpx, timed on the client, turned into a RequestResult.

bench talks to any OpenAI-compatible server (this project's, TabbyAPI, vLLM, llama.cpp,
`transformers serve`): the request is plain OpenAI plus two optional fields that the profile says
the server accepts (`ignore_eos`, `stream_options.include_usage`). Usage extensions are read where
present: `prompt_tokens_details.cached_tokens`, `timings.{queue_s,prefill_s,decode_s}` and
`speculative.{accepted_tokens,rejected_tokens}` (this project's server), or llama.cpp's top-level
`timings.{prompt_ms,predicted_ms,cache_n}`.

Usage:
    endpoint = Endpoint.from_key_file("http://127.0.0.1:18020", Path("key.txt"))
    with Client(endpoint, timeout_s=600) as client:
        models = client.get_json("/v1/models")
        result = client.stream(spec, body)       # never raises for a failed request
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.errors import BenchConfigError, ProtocolError, ServerRejected, ServerUnreachable
from bench.records import Api, RequestResult, RequestSpec

__all__ = ["Client", "Endpoint", "build_body", "parse_usage"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class Endpoint:
    """Where the server is. The key is never shown in repr, logs or results."""

    url: str
    api_key: str | None = field(default=None, repr=False)
    model: str | None = None  # None: the first model /v1/models lists

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise BenchConfigError(f"--url must start with http:// or https://, got {self.url!r}")
        base = self.url.rstrip("/")
        base = base.removesuffix("/v1")
        object.__setattr__(self, "url", base)

    @classmethod
    def from_key_file(cls, url: str, key_file: Path | None, model: str | None = None) -> Endpoint:
        """Read the API key from a file (first line, stripped)."""
        if key_file is None:
            return cls(url=url, model=model)
        try:
            key = key_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise BenchConfigError(f"cannot read --api-key-file {key_file}: {exc.strerror}") from exc
        if not key:
            raise BenchConfigError(f"--api-key-file {key_file} is empty")
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
) -> dict[str, Any]:
    """A greedy request for `text`, with only the optional fields the server accepts, plus `extra`."""
    body: dict[str, Any] = {**(extra or {}), "model": model, "max_tokens": max_tokens, "temperature": 0}
    body["stream"] = stream
    if api == "chat":
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = text
    if ignore_eos:
        body["ignore_eos"] = True
    if stream and stream_options:
        body["stream_options"] = {"include_usage": True}
    return body


def parse_usage(chunk: dict[str, Any]) -> dict[str, Any]:
    """RequestResult fields from a chunk's usage (and llama.cpp's timings), where present."""
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


def _chunk_text(chunk: dict[str, Any]) -> tuple[str, str | None]:
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


class Client:
    """An httpx client bound to one endpoint; set-up calls raise, measured calls return data."""

    def __init__(self, endpoint: Endpoint, *, timeout_s: float):
        headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
        self.endpoint = endpoint
        self._http = httpx.Client(
            base_url=endpoint.url,
            headers=headers,
            timeout=httpx.Timeout(timeout_s, connect=10.0),
        )

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
            raise ServerUnreachable(f"GET {self.endpoint.url}{path}: {type(exc).__name__}: {exc}") from exc
        if missing_ok and response.status_code in (404, 405):
            return None
        return self._json_or_raise("GET", path, response)

    def post_json(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST and return the JSON answer (non-streaming set-up requests).

        Raises:
            ServerUnreachable, ServerRejected, ProtocolError.
        """
        try:
            response = self._http.post(path, json=body)
        except httpx.TransportError as exc:
            raise ServerUnreachable(f"POST {self.endpoint.url}{path}: {type(exc).__name__}: {exc}") from exc
        return self._json_or_raise("POST", path, response)

    def _json_or_raise(self, method: str, path: str, response: httpx.Response) -> dict[str, Any]:
        if response.status_code >= 400:
            hint = " (check --api-key-file)" if response.status_code in (401, 403) else ""
            raise ServerRejected(
                f"{method} {path} answered HTTP {response.status_code}{hint}: {_error_message(response)}",
                status=response.status_code,
            )
        try:
            data = response.json()
        except ValueError as exc:
            raise ProtocolError(f"{method} {path} answered non-JSON: {response.text[:200]!r}") from exc
        if not isinstance(data, dict):
            raise ProtocolError(f"{method} {path} answered {type(data).__name__}, expected a JSON object")
        return data

    def stream(self, spec: RequestSpec, body: dict[str, Any], path: str) -> RequestResult:
        """Send one streaming request and time it; failures come back as ok=False results."""
        started_unix = time.time()
        t0 = time.perf_counter()
        fields: dict[str, Any] = {}
        token_times: list[float] = []
        finish_at: float | None = None
        finish_reason: str | None = None
        try:
            with self._http.stream("POST", path, json=body) as response:
                if response.status_code != 200:
                    response.read()
                    return RequestResult(
                        spec=spec,
                        ok=False,
                        error=f"HTTP {response.status_code}: {_error_message(response)}",
                        http_status=response.status_code,
                        started_at_unix_s=started_unix,
                        latency_s=time.perf_counter() - t0,
                    )
                for line in response.iter_lines():
                    now = time.perf_counter() - t0
                    if not line.startswith("data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == "[DONE]":
                        break
                    chunk = json.loads(payload)
                    if isinstance(chunk, dict) and chunk.get("error"):
                        raise _StreamFailed(str(chunk["error"]))
                    text, finish = _chunk_text(chunk)
                    fields.update(parse_usage(chunk))
                    if text:
                        token_times.append(now)
                    if finish and finish_at is None:
                        finish_at, finish_reason = now, finish
        except (httpx.TransportError, _StreamFailed, json.JSONDecodeError) as exc:
            kind = "transport" if isinstance(exc, httpx.TransportError) else "stream"
            return RequestResult(
                spec=spec,
                ok=False,
                error=f"{kind}: {type(exc).__name__}: {exc}",
                http_status=200 if kind == "stream" else None,
                started_at_unix_s=started_unix,
                latency_s=time.perf_counter() - t0,
            )
        latency = time.perf_counter() - t0
        return RequestResult(
            spec=spec,
            ok=True,
            http_status=200,
            started_at_unix_s=started_unix,
            latency_s=latency,
            ttft_s=token_times[0] if token_times else None,
            finish_s=finish_at,
            itl_s=tuple(round(b - a, 6) for a, b in zip(token_times, token_times[1:], strict=False)),
            text_chunks=len(token_times),
            finish_reason=finish_reason,
            **fields,
        )


class _StreamFailed(Exception):
    """The server reported an error inside an already-started stream."""
