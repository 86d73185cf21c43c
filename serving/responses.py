"""Engine events into OpenAI responses: whole JSON bodies, SSE streams, usage and logprobs.

The handlers in serving.app check a request and build its engine job; the functions here run the
job and write what the client sees. Nothing here checks input or decides tokens.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse

from serving.api_requests import ApiError, ChatRequest, CompletionRequest
from serving.engine import EngineUsage, FinishEvent, GenerationRequest, ScoreRequest, TokenEvent, TokenScore
from serving.reasoning import ReasoningSplitter

if TYPE_CHECKING:
    from serving.state import ServerState

__all__ = ["chat_stream", "chat_whole", "completion_stream", "completion_whole", "sse", "until_disconnect"]

log = logging.getLogger(__name__)


def sse(events: AsyncIterator[dict]) -> StreamingResponse:
    async def body():
        async for event in events:
            yield f"data: {json.dumps(event, separators=(',', ':'))}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(body(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


async def until_disconnect(request: Request, work) -> JSONResponse:
    """Run a non-streaming request; a client that goes away cancels its engine job."""
    task = asyncio.ensure_future(work)
    while True:
        done, _ = await asyncio.wait({task}, timeout=0.5)
        if done:
            return task.result()
        if await request.is_disconnected():
            task.cancel()
            log.info("client disconnected: job cancelled")
            return JSONResponse(ApiError(499, "client closed the request").body(), status_code=499)


def _usage(usage: EngineUsage, completion_tokens: int | None = None) -> dict:
    completion = usage.completion_tokens if completion_tokens is None else completion_tokens
    out = {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": usage.prompt_tokens + completion,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        "timings": {"queue_s": round(usage.queue_s, 6), "prefill_s": round(usage.prefill_s, 6),
                    "decode_s": round(usage.decode_s, 6)},
    }
    if usage.drafted_tokens is not None:  # only from an engine that drafts: absent is not "0 % accepted"
        out["speculative"] = {"drafted_tokens": usage.drafted_tokens, "accepted_tokens": usage.accepted_draft_tokens,
                              "rejected_tokens": usage.rejected_draft_tokens}
    return out


def _engine_error(finish: FinishEvent) -> ApiError:
    return ApiError(500, f"the engine failed this request: {finish.error}", type="server_error", code="engine_error")


def _token_name(state: ServerState, token_id: int, as_ids: bool) -> str:
    return f"token_id:{token_id}" if as_ids else state.engine.codec.token_text(token_id)


# ---- chat ----

def _chat_logprob(state: ServerState, event: TokenEvent, as_ids: bool) -> dict:
    codec = state.engine.codec
    return {
        "token": _token_name(state, event.token_id, as_ids),
        "logprob": event.logprob,
        "bytes": list(codec.token_bytes(event.token_id)),
        "top_logprobs": [{"token": _token_name(state, t, as_ids), "logprob": lp, "bytes": list(codec.token_bytes(t))}
                         for t, lp in event.top],
    }


async def chat_whole(state: ServerState, req: ChatRequest, gen: GenerationRequest,
                      splitter: ReasoningSplitter) -> JSONResponse:
    reasoning, content, logprobs = [], [], []
    finish = None
    async for event in state.engine.generate(gen):
        if isinstance(event, FinishEvent):
            finish = event
            break
        for kind, text in splitter.push(event.text):
            (reasoning if kind == "reasoning" else content).append(text)
        if req.logprobs and event.token_id >= 0:
            logprobs.append(_chat_logprob(state, event, req.tokens_as_ids))
    if finish.error:
        raise _engine_error(finish)
    for kind, text in splitter.flush():
        (reasoning if kind == "reasoning" else content).append(text)
    message = {"role": "assistant", "content": "".join(content)}
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    return JSONResponse({
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": state.model_name,
        "choices": [{"index": 0, "message": message, "finish_reason": finish.reason,
                     "logprobs": {"content": logprobs} if req.logprobs else None}],
        "usage": _usage(finish.usage),
    })


async def chat_stream(state: ServerState, req: ChatRequest, gen: GenerationRequest,
                       splitter: ReasoningSplitter) -> AsyncIterator[dict]:
    base = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": state.model_name}

    def chunk(delta: dict, *, finish_reason=None, logprobs=None) -> dict:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
        if logprobs is not None:
            choice["logprobs"] = {"content": logprobs}
        return {**base, "choices": [choice]}

    def deltas(parts) -> list[dict]:
        return [{"reasoning_content" if kind == "reasoning" else "content": text} for kind, text in parts]

    yield chunk({"role": "assistant", "content": ""})
    async for event in state.engine.generate(gen):
        if isinstance(event, FinishEvent):
            if event.error:
                yield {"error": _engine_error(event).body()["error"]}
                return
            for delta in deltas(splitter.flush()):
                yield chunk(delta)
            yield chunk({}, finish_reason=event.reason)
            if req.include_usage:
                yield {**base, "choices": [], "usage": _usage(event.usage)}
            return
        parts = deltas(splitter.push(event.text))
        lp = [_chat_logprob(state, event, req.tokens_as_ids)] if req.logprobs and event.token_id >= 0 else None
        if not parts and lp:
            parts = [{"content": ""}]
        for i, delta in enumerate(parts):
            yield chunk(delta, logprobs=lp if i == 0 else None)


# ---- completions ----

def _completion_logprobs(state: ServerState, ids: list[int], scores: list[TokenScore], as_ids: bool,
                         offset0: int) -> dict:
    tokens, token_logprobs, tops, offsets = [], [], [], []
    offset = offset0
    for token_id, score in zip(ids, scores, strict=True):
        name = _token_name(state, token_id, as_ids)
        tokens.append(name)
        token_logprobs.append(score.logprob)
        tops.append({_token_name(state, t, as_ids): lp for t, lp in score.top} if score.logprob is not None else None)
        offsets.append(offset)
        offset += len(state.engine.codec.token_text(token_id))
    return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": tops, "text_offset": offsets}


async def _score_prompt(state: ServerState, req: CompletionRequest, ids: list[int]) -> FinishEvent:
    finish = await state.engine.score(ScoreRequest(
        prompt_ids=tuple(ids), decode_from=req.score_decode_from or 1, top_logprobs=req.logprobs or 0))
    if finish.error:
        raise _engine_error(finish)
    return finish


async def completion_whole(state: ServerState, req: CompletionRequest, ids: list[int],
                            gen: GenerationRequest | None) -> JSONResponse:
    codec = state.engine.codec
    text, logprobs = "", None
    usage = EngineUsage(prompt_tokens=len(ids))
    if req.echo:
        text = codec.decode(ids, skip_special=False)
        if req.logprobs is not None:
            scored = await _score_prompt(state, req, ids)
            logprobs = _completion_logprobs(state, ids, list(scored.scores), req.tokens_as_ids, 0)
            usage = scored.usage
            usage.completion_tokens = 0
    finish_reason = "length"
    if gen is not None:
        pieces, events = [], []
        finish = None
        async for event in state.engine.generate(gen):
            if isinstance(event, FinishEvent):
                finish = event
                break
            pieces.append(event.text)
            if event.token_id >= 0:
                events.append(event)
        if finish.error:
            raise _engine_error(finish)
        if req.logprobs is not None:
            gen_lp = _completion_logprobs(state, [e.token_id for e in events],
                                          [TokenScore(e.logprob, e.top) for e in events], req.tokens_as_ids, len(text))
            logprobs = gen_lp if logprobs is None else {k: logprobs[k] + gen_lp[k] for k in logprobs}
        text += "".join(pieces)
        usage, finish_reason = finish.usage, finish.reason
    return JSONResponse({
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": state.model_name,
        "choices": [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}],
        "usage": _usage(usage),
    })


async def completion_stream(state: ServerState, req: CompletionRequest, ids: list[int],
                             gen: GenerationRequest | None) -> AsyncIterator[dict]:
    base = {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
            "model": state.model_name}

    def chunk(text: str, *, logprobs=None, finish_reason=None) -> dict:
        return {**base, "choices": [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}]}

    usage = EngineUsage(prompt_tokens=len(ids))
    offset = 0
    if req.echo:
        text = state.engine.codec.decode(ids, skip_special=False)
        logprobs = None
        if req.logprobs is not None:
            scored = await _score_prompt(state, req, ids)
            logprobs = _completion_logprobs(state, ids, list(scored.scores), req.tokens_as_ids, 0)
            usage = scored.usage
            usage.completion_tokens = 0
        yield chunk(text, logprobs=logprobs, finish_reason=None if gen else "length")
        offset = len(text)
    if gen is not None:
        async for event in state.engine.generate(gen):
            if isinstance(event, FinishEvent):
                if event.error:
                    yield {"error": _engine_error(event).body()["error"]}
                    return
                usage = event.usage
                yield chunk("", finish_reason=event.reason)
                break
            lp = None
            if req.logprobs is not None and event.token_id >= 0:
                lp = _completion_logprobs(state, [event.token_id], [TokenScore(event.logprob, event.top)],
                                          req.tokens_as_ids, offset)
            offset += len(event.text)
            yield chunk(event.text, logprobs=lp)
    if req.include_usage:
        yield {**base, "choices": [], "usage": _usage(usage)}
