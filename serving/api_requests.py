"""Parse OpenAI request bodies into typed, validated requests; every problem is a 400 with a reason.

Validation is strict about types (a string where a number belongs is an error, never coerced) and
explicit about what is not supported (tools, n > 1, logit_bias), so a client never gets a silent
approximation of what it asked for. Unknown fields are ignored, as OpenAI-compatible servers do,
because SDKs send optional fields freely.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from serving.chat_template import RESERVED_TEMPLATE_ARGS
from serving.engine import SamplingParams

__all__ = ["ApiError", "ChatRequest", "CompletionRequest", "parse_chat", "parse_completion"]

_MISSING = object()
MIN_TEMPERATURE = 1e-3
ROLES = ("system", "developer", "user", "assistant", "tool", "function")


class ApiError(Exception):
    """An OpenAI-style error response."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 type: str = "invalid_request_error"):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


@dataclass(frozen=True, kw_only=True, slots=True)
class _Common:
    model: str | None
    max_tokens: int | None
    sampling: SamplingParams
    stop: tuple[str, ...]
    stream: bool
    include_usage: bool
    ignore_eos: bool
    tokens_as_ids: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class ChatRequest(_Common):
    messages: list[dict]
    logprobs: bool
    top_logprobs: int
    template_kwargs: dict


@dataclass(frozen=True, kw_only=True, slots=True)
class CompletionRequest(_Common):
    prompt: str | list[int]
    echo: bool
    logprobs: int | None
    score_decode_from: int | None


def _get(body: dict, name: str, kind: type | tuple, default: Any = None, *, lo=None, hi=None, nullable=True) -> Any:
    value = body.get(name, _MISSING)
    if value is _MISSING or (value is None and nullable):
        return default
    kinds = kind if isinstance(kind, tuple) else (kind,)
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
    if float in kinds and isinstance(value, int) and not isinstance(value, bool):
        ok, value = True, float(value)
    if not ok:
        names = " or ".join(k.__name__ for k in kinds).replace("str", "string").replace("float", "number").replace("int", "integer").replace("bool", "boolean")
        raise ApiError(400, f"'{name}' must be {names}, got {type(value).__name__}: {value!r:.100}", param=name)
    if isinstance(value, float) and not math.isfinite(value):
        raise ApiError(400, f"'{name}' must be a finite number, got {value}", param=name)
    if lo is not None and value < lo or hi is not None and value > hi:
        raise ApiError(400, f"'{name}' must be between {lo} and {hi}, got {value}", param=name)
    return value


def _text(value: str, name: str) -> str:
    """A string that can be encoded: JSON may carry lone surrogates that no tokenizer takes."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ApiError(400, f"'{name}' is not valid Unicode (a lone surrogate at {exc.start})", param=name) from exc
    return value


def _common(body: dict, *, max_tokens_names: tuple[str, ...], default_max_tokens: int | None) -> dict:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    n = _get(body, "n", int, 1)
    if n != 1:
        raise ApiError(400, f"only n=1 is supported, got n={n}", param="n")
    if body.get("logit_bias"):
        raise ApiError(400, "logit_bias is not supported", param="logit_bias")
    if body.get("tools"):
        raise ApiError(400, "tool calling is not supported by this server", param="tools")
    fmt = body.get("response_format")
    if fmt is not None and (not isinstance(fmt, dict) or fmt.get("type", "text") != "text"):
        raise ApiError(400, "only response_format {'type': 'text'} is supported", param="response_format")
    max_tokens = default_max_tokens
    for name in max_tokens_names:
        value = _get(body, name, int, None, lo=0, hi=2**31 - 1)
        if value is not None:
            max_tokens = value
    stop = body.get("stop")
    if stop is None:
        stop = ()
    elif isinstance(stop, str):
        stop = (stop,)
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        if len(stop) > 16:
            raise ApiError(400, "at most 16 stop strings are supported", param="stop")
        stop = tuple(stop)
    if isinstance(stop, tuple):
        if any(not s for s in stop):
            raise ApiError(400, "a stop string must not be empty", param="stop")
        stop = tuple(_text(s, "stop") for s in stop)
    else:
        raise ApiError(400, "'stop' must be a string or a list of strings", param="stop")
    stream_options = _get(body, "stream_options", dict, {})
    top_k = _get(body, "top_k", int, 0, lo=-1, hi=2**31 - 1)
    temperature = _get(body, "temperature", float, 1.0, lo=0.0, hi=2.0)
    if 0.0 < temperature < MIN_TEMPERATURE:  # logits / 1e-45 overflow to inf, and sampling turns NaN
        raise ApiError(400, f"'temperature' must be 0 (greedy) or at least {MIN_TEMPERATURE}, got {temperature}",
                       param="temperature")
    sampling = SamplingParams(
        temperature=temperature,
        top_p=_get(body, "top_p", float, 1.0, lo=0.0, hi=1.0),
        top_k=max(top_k, 0),
        min_p=_get(body, "min_p", float, 0.0, lo=0.0, hi=1.0),
        repetition_penalty=_get(body, "repetition_penalty", float, 1.0, lo=0.01, hi=10.0),
        presence_penalty=_get(body, "presence_penalty", float, 0.0, lo=-2.0, hi=2.0),
        frequency_penalty=_get(body, "frequency_penalty", float, 0.0, lo=-2.0, hi=2.0),
        seed=_get(body, "seed", int, None, lo=0, hi=2**63 - 1),
    )
    if sampling.top_p == 0.0:
        raise ApiError(400, "'top_p' must be greater than 0", param="top_p")
    return dict(
        model=_get(body, "model", str, None),
        max_tokens=max_tokens,
        sampling=sampling,
        stop=stop,
        stream=_get(body, "stream", bool, False),
        include_usage=bool(_get(stream_options, "include_usage", bool, False)),
        ignore_eos=_get(body, "ignore_eos", bool, False),
        tokens_as_ids=_get(body, "return_tokens_as_token_ids", bool, False),
    )


def parse_chat(body: Any) -> ChatRequest:
    common = _common(body, max_tokens_names=("max_tokens", "max_completion_tokens"), default_max_tokens=None)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages' must be a non-empty list", param="messages")
    clean = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ApiError(400, f"messages[{i}] must be an object with a string 'role'", param="messages")
        if message["role"] not in ROLES:  # templates write the role verbatim: no special tokens through it
            raise ApiError(400, f"messages[{i}].role must be one of {', '.join(ROLES)}, got {message['role']!r:.50}",
                           param="messages")
        content = message.get("content")
        if isinstance(content, list):  # content parts: text only
            texts = []
            for part in content:
                if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise ApiError(400, f"messages[{i}].content: only text parts are supported", param="messages")
                texts.append(part["text"])
            content = "".join(texts)
        elif content is None:
            content = ""  # OpenAI allows null content (an assistant turn that only called tools)
        elif not isinstance(content, str):
            raise ApiError(400, f"messages[{i}].content must be a string or a list of text parts", param="messages")
        clean.append({**message, "content": _text(content, f"messages[{i}].content")})
    logprobs = _get(body, "logprobs", bool, False)
    top_logprobs = _get(body, "top_logprobs", int, 0, lo=0, hi=20)
    kwargs = _get(body, "chat_template_kwargs", dict, {})
    clash = sorted(set(kwargs) & set(RESERVED_TEMPLATE_ARGS))
    if clash:
        raise ApiError(400, f"chat_template_kwargs may not set {', '.join(clash)}: the server sets them",
                       param="chat_template_kwargs")
    if "enable_thinking" in body and "enable_thinking" not in kwargs:
        kwargs = {**kwargs, "enable_thinking": _get(body, "enable_thinking", bool, True)}
    return ChatRequest(**common, messages=clean, logprobs=logprobs, top_logprobs=top_logprobs if logprobs else 0,
                       template_kwargs=kwargs)


def parse_completion(body: Any) -> CompletionRequest:
    common = _common(body, max_tokens_names=("max_tokens",), default_max_tokens=16)
    if body.get("suffix"):
        raise ApiError(400, "'suffix' is not supported", param="suffix")
    prompt = body.get("prompt", _MISSING)
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, list):
        if not prompt or not all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            raise ApiError(400, "'prompt' must be a string, or a non-empty list of token ids", param="prompt")
    elif not isinstance(prompt, str) or not prompt:
        raise ApiError(400, "'prompt' must be a non-empty string, or a list of token ids (one prompt only)", param="prompt")
    else:
        prompt = _text(prompt, "prompt")
    logprobs = _get(body, "logprobs", int, None, lo=0, hi=20)
    decode_from = _get(body, "score_decode_from", int, None, lo=1)
    return CompletionRequest(**common, prompt=prompt, echo=_get(body, "echo", bool, False), logprobs=logprobs,
                             score_decode_from=decode_from)
