"""The HTTP layer: OpenAI routes over an engine, and nothing measurable on top of it.

Handlers turn a request into an engine job (here) and engine events into OpenAI JSON or SSE
(serving.responses). Everything that decides tokens lives in the engine; everything that checks a
body's fields lives in api_requests, and what needs the served model (its name, vocabulary, context)
is checked here.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging

from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from starlette.middleware.trustedhost import TrustedHostMiddleware

from serving.api_requests import (
    ApiError,
    ChatBody,
    ChatRequest,
    CompletionBody,
    CompletionRequest,
    parse_chat,
    parse_completion,
)
from serving.chat_template import TemplateError
from serving.engine import GenerationRequest
from serving.limits import RequestLimits
from serving.reasoning import ReasoningSplitter, prompt_opens_reasoning
from serving.responses import (
    chat_stream,
    chat_whole,
    completion_stream,
    completion_whole,
    sse,
    until_disconnect,
)
from serving.state import ServerState

__all__ = ["create_app"]

log = logging.getLogger(__name__)


def create_app(state: ServerState, *, allowed_hosts: list[str] | None = None) -> FastAPI:
    """The app; with `allowed_hosts`, any other Host header is refused (400) before a route runs."""
    app = FastAPI(title="exl3-autoresearch server", docs_url=None, redoc_url=None, openapi_url="/openapi.json")
    app.openapi = lambda: _openapi(app)
    if allowed_hosts is not None:
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts)

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(404)
    async def _not_found(request: Request, _exc) -> JSONResponse:
        return JSONResponse(ApiError(404, f"no route {request.method} {request.url.path}").body(), status_code=404)

    @app.exception_handler(405)
    async def _not_allowed(request: Request, _exc) -> JSONResponse:
        return JSONResponse(ApiError(405, f"method {request.method} not allowed on {request.url.path}").body(),
                            status_code=405)

    @app.get("/health")
    async def health() -> JSONResponse:
        engine = state.engine
        if engine.failed is not None:  # failed to load, or its worker died: nothing will be served
            return JSONResponse({"status": "failed", "error": f"{type(engine.failed).__name__}: {engine.failed}"},
                                status_code=503)
        if not engine.ready.is_set():
            return JSONResponse({"status": "loading"}, status_code=503)
        return JSONResponse({"status": "ok"})

    @app.get("/v1/models")
    async def models(request: Request) -> JSONResponse:
        _authorize(state, request)
        return JSONResponse({"object": "list", "data": [{
            "id": state.model_name, "object": "model", "created": state.created,
            "owned_by": "exl3-autoresearch", "max_model_len": state.engine.context_tokens,
        }]})

    @app.get("/v1/server_info")
    async def server_info(request: Request) -> JSONResponse:
        _authorize(state, request)
        loop = type(asyncio.get_running_loop())
        return JSONResponse({
            **state.engine.info(),
            "event_loop": f"{loop.__module__}.{loop.__qualname__}",
            "model": state.model_name,
            "model_dir": str(state.model_dir),
            "config": state.config.to_dict(),
            "config_digest": state.config.digest,
        })

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        _authorize(state, request)
        _require_ready(state)
        raw = await _read_body(request, state.limits)
        # parsing, templating and tokenizing a large body take a while: never on the event loop
        req, prompt, gen = await asyncio.to_thread(_prepare_chat, state, raw)
        splitter = ReasoningSplitter(start_in_reasoning=prompt_opens_reasoning(prompt))
        if req.stream:
            return sse(chat_stream(state, req, gen, splitter))
        return await until_disconnect(request, chat_whole(state, req, gen, splitter))

    @app.post("/v1/completions")
    async def completions(request: Request):
        _authorize(state, request)
        _require_ready(state)
        raw = await _read_body(request, state.limits)
        req, ids, gen = await asyncio.to_thread(_prepare_completion, state, raw)
        if req.stream:
            return sse(completion_stream(state, req, ids, gen))
        return await until_disconnect(request, completion_whole(state, req, ids, gen))

    return app


def _openapi(app: FastAPI) -> dict:
    """The OpenAPI document, with the request bodies' schemas: the handlers read their bodies themselves
    (off the event loop, within limits), so FastAPI cannot infer them; fuzzers need them."""
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version="1", routes=app.routes,
                             description="OpenAI-compatible chat and completions over exllamav3")
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for path, model in (("/v1/chat/completions", ChatBody), ("/v1/completions", CompletionBody)):
            body = model.model_json_schema(ref_template="#/components/schemas/{model}")
            components.update(body.pop("$defs", {}))
            components[model.__name__] = body
            schema["paths"][path]["post"]["requestBody"] = {"required": True, "content": {
                "application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}}
        app.openapi_schema = schema
    return app.openapi_schema


def _prepare_chat(state: ServerState, raw: bytes) -> tuple[ChatRequest, str, GenerationRequest]:
    req = parse_chat(_parse_json(raw))
    _check_model(state, req.model)
    try:
        prompt = state.template.render(req.messages, add_generation_prompt=True, **req.template_kwargs)
    except TemplateError as exc:
        raise ApiError(400, f"chat template: {exc}", param="messages") from exc
    ids = state.engine.codec.encode(prompt)
    return req, prompt, _generation(state, req, ids, top_logprobs=req.top_logprobs if req.logprobs else None)


def _prepare_completion(state: ServerState, raw: bytes) -> tuple[CompletionRequest, list[int], GenerationRequest | None]:
    req = parse_completion(_parse_json(raw))
    _check_model(state, req.model)
    codec = state.engine.codec
    ids = list(req.prompt) if isinstance(req.prompt, list) else codec.encode(req.prompt)
    if any(not 0 <= t < codec.vocab_size for t in ids):
        raise ApiError(400, f"prompt token ids must be in [0, {codec.vocab_size})", param="prompt")
    _check_context(state, ids, "prompt")  # scoring (echo + logprobs) runs the prompt through the engine too
    if req.score_decode_from is not None and req.score_decode_from > len(ids):
        raise ApiError(400, f"score_decode_from {req.score_decode_from} is past the prompt's {len(ids)} tokens",
                       param="score_decode_from")
    gen = _generation(state, req, ids, top_logprobs=req.logprobs) if req.max_tokens else None
    if gen is None and not req.echo:
        raise ApiError(400, "max_tokens 0 makes sense only with echo", param="max_tokens")
    return req, ids, gen


# ---- request plumbing ----

def _authorize(state: ServerState, request: Request) -> None:
    if state.api_key is None:
        return
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), state.api_key.encode()):
        raise ApiError(401, "missing or invalid API key (send Authorization: Bearer KEY)",
                       type="authentication_error", code="invalid_api_key")


def _require_ready(state: ServerState) -> None:
    failed = state.engine.failed
    if failed is not None:
        raise ApiError(503, f"the engine failed and serves nothing: {type(failed).__name__}: {failed}",
                       type="server_error", code="engine_failed")
    if not state.engine.ready.is_set():
        raise ApiError(503, "the model is not loaded yet", type="server_error", code="model_not_ready")


def _check_model(state: ServerState, model: str | None) -> None:
    if model is not None and model != state.model_name:
        raise ApiError(404, f"the model '{model}' does not exist; this server serves '{state.model_name}'",
                       param="model", code="model_not_found")


async def _read_body(request: Request, limits: RequestLimits) -> bytes:
    """The body, if it is JSON, within the size limit, and arrives in time (415, 413, 408 otherwise)."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != "application/json":  # a web page's form or text/plain POST cannot drive generations
        raise ApiError(415, f"send the body as application/json, not {media or 'no content type'}",
                       code="unsupported_media_type")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limits.max_body_bytes:
        raise ApiError(413, f"the body has {declared} bytes; this server takes at most {limits.max_body_bytes}",
                       code="body_too_large")

    async def read() -> bytes:
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limits.max_body_bytes:
                raise ApiError(413, f"the body is over this server's limit of {limits.max_body_bytes} bytes",
                               code="body_too_large")
            chunks.append(chunk)
        return b"".join(chunks)

    try:
        return await asyncio.wait_for(read(), timeout=limits.body_timeout_s)
    except TimeoutError as exc:
        raise ApiError(408, f"the body did not arrive within {limits.body_timeout_s:g} s", code="request_timeout") from exc


def _parse_json(raw: bytes):
    try:
        return json.loads(raw, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:  # bad JSON, bad UTF-8, NaN, a 5000-digit number, deep nesting
        reason = "it is nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:200]
        raise ApiError(400, f"the request body is not valid JSON: {reason}") from exc


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _check_context(state: ServerState, ids: list[int], param: str) -> None:
    limit = state.engine.context_tokens
    if len(ids) >= limit:
        raise ApiError(400, f"the prompt has {len(ids)} tokens; this model's context window is {limit} tokens",
                       param=param, code="context_length_exceeded")


def _generation(state: ServerState, req: ChatRequest | CompletionRequest, ids: list[int], *,
                top_logprobs: int | None) -> GenerationRequest:
    limit = state.engine.context_tokens
    _check_context(state, ids, "messages" if isinstance(req, ChatRequest) else "prompt")
    max_tokens = req.max_tokens if req.max_tokens is not None else limit - len(ids)
    if max_tokens > limit - len(ids):
        raise ApiError(400, f"max_tokens {max_tokens} plus the prompt's {len(ids)} tokens exceeds the context "
                       f"window of {limit} tokens", param="max_tokens", code="context_length_exceeded")
    return GenerationRequest(prompt_ids=tuple(ids), max_new_tokens=max_tokens, sampling=req.sampling,
                             stop_strings=req.stop, ignore_eos=req.ignore_eos, top_logprobs=top_logprobs)
