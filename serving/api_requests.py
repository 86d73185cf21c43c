"""OpenAI request bodies: their schema (pydantic models, also served as /openapi.json) and parsing
into typed requests; every problem is a 400 in the OpenAI error shape, with a reason.

Validation is strict about types (a string where a number belongs is an error, never coerced),
rejects non-finite and out-of-range numbers before they reach sampling, and is explicit about what
is not supported (tools, n > 1, logit_bias), so a client never gets a silent approximation of what
it asked for. Unknown fields are ignored, as OpenAI-compatible servers do, because SDKs send optional
fields freely.

Usage:
    req = parse_chat(json_object)          # ChatRequest, or raises ApiError(400, ...)
    ChatBody.model_json_schema()            # the request body's JSON Schema
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from serving.chat_template import RESERVED_TEMPLATE_ARGS
from serving.engine import SamplingParams

__all__ = ["ApiError", "ChatBody", "ChatRequest", "CompletionBody", "CompletionRequest", "parse_chat",
           "parse_completion"]

MIN_TEMPERATURE = 1e-3  # logits / 1e-45 overflow to inf, and sampling turns NaN
ROLES = ("system", "developer", "user", "assistant", "tool", "function")
_INT32 = 2**31 - 1


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


# ---- the wire schema ----

class _Body(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", allow_inf_nan=False)


class _TextPart(_Body):
    type: Literal["text"]
    text: str


class Message(_Body):
    """One chat message; other keys (name, tool_call_id, ...) reach the chat template as sent."""

    model_config = ConfigDict(strict=True, extra="allow", allow_inf_nan=False)
    role: Literal[ROLES]  # templates write the role verbatim: no special tokens through it
    content: str | list[_TextPart] | None = None  # null: an assistant turn that only called tools

    def as_template_message(self) -> dict:
        content = self.content
        if isinstance(content, list):
            content = "".join(part.text for part in content)
        return {**(self.model_extra or {}), "role": self.role, "content": content or ""}


class _StreamOptions(_Body):
    include_usage: bool = False


class _Sampling(_Body):
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] | None = None
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    top_k: Annotated[int, Field(ge=-1, le=_INT32)] | None = None
    min_p: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    repetition_penalty: Annotated[float, Field(ge=0.01, le=10.0)] | None = None
    presence_penalty: Annotated[float, Field(ge=-2.0, le=2.0)] | None = None
    frequency_penalty: Annotated[float, Field(ge=-2.0, le=2.0)] | None = None
    seed: Annotated[int, Field(ge=0, le=2**63 - 1)] | None = None
    stop: str | list[str] | None = None
    stream: bool | None = None
    stream_options: _StreamOptions | None = None
    ignore_eos: bool | None = None
    return_tokens_as_token_ids: bool | None = None
    model: str | None = None
    n: int | None = None
    logit_bias: dict[str, Any] | None = None
    tools: list[Any] | None = None
    response_format: dict[str, Any] | None = None

    @field_validator("temperature")
    @classmethod
    def _not_subnormal(cls, value: float | None) -> float | None:
        if value is not None and 0.0 < value < MIN_TEMPERATURE:
            raise ValueError(f"'temperature' must be 0 (greedy) or at least {MIN_TEMPERATURE}, got {value}")
        return value

    @field_validator("stop")
    @classmethod
    def _stop_strings(cls, value):
        strings = [value] if isinstance(value, str) else value or []
        if len(strings) > 16:
            raise ValueError("at most 16 stop strings are supported")
        if any(not s for s in strings):
            raise ValueError("a stop string must not be empty")
        return value

    @model_validator(mode="after")
    def _supported(self):
        if self.n not in (None, 1):
            raise ValueError(f"only n=1 is supported, got n={self.n}")
        if self.logit_bias:
            raise ValueError("logit_bias is not supported")
        if self.tools:
            raise ValueError("tool calling is not supported by this server")
        if self.response_format is not None and self.response_format.get("type", "text") != "text":
            raise ValueError("only response_format {'type': 'text'} is supported")
        return self


class ChatBody(_Sampling):
    """POST /v1/chat/completions."""

    messages: Annotated[list[Message], Field(min_length=1)]
    max_tokens: Annotated[int, Field(ge=1, le=_INT32)] | None = None  # a chat answers with a token at least
    max_completion_tokens: Annotated[int, Field(ge=1, le=_INT32)] | None = None
    logprobs: bool | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    enable_thinking: bool | None = None

    @field_validator("chat_template_kwargs")
    @classmethod
    def _not_reserved(cls, value: dict | None) -> dict | None:
        clash = sorted(set(value or {}) & set(RESERVED_TEMPLATE_ARGS))
        if clash:
            raise ValueError(f"chat_template_kwargs may not set {', '.join(clash)}: the server sets them")
        return value


class CompletionBody(_Sampling):
    """POST /v1/completions: one prompt, as text or token ids."""

    prompt: Annotated[str, Field(min_length=1)] | Annotated[list[int], Field(min_length=1)] \
        | Annotated[list[Annotated[str, Field(min_length=1)] | Annotated[list[int], Field(min_length=1)]],
                    Field(min_length=1, max_length=1)]
    max_tokens: Annotated[int, Field(ge=0, le=_INT32)] | None = None
    echo: bool | None = None
    logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    score_decode_from: Annotated[int, Field(ge=1)] | None = None
    suffix: str | None = None

    @field_validator("suffix")
    @classmethod
    def _no_suffix(cls, value: str | None) -> str | None:
        if value:
            raise ValueError("'suffix' is not supported")
        return value


# ---- the typed requests the handlers use ----

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


def parse_chat(body: Any) -> ChatRequest:
    b = _validate(ChatBody, body)
    max_tokens = b.max_completion_tokens if b.max_completion_tokens is not None else b.max_tokens
    kwargs = dict(b.chat_template_kwargs or {})
    if b.enable_thinking is not None and "enable_thinking" not in kwargs:
        kwargs["enable_thinking"] = b.enable_thinking
    return ChatRequest(**_common(b, max_tokens), messages=[m.as_template_message() for m in b.messages],
                       logprobs=bool(b.logprobs), top_logprobs=(b.top_logprobs or 0) if b.logprobs else 0,
                       template_kwargs=kwargs)


def parse_completion(body: Any) -> CompletionRequest:
    b = _validate(CompletionBody, body)
    prompt = b.prompt[0] if isinstance(b.prompt, list) and isinstance(b.prompt[0], str | list) else b.prompt
    return CompletionRequest(**_common(b, 16 if b.max_tokens is None else b.max_tokens), prompt=prompt,
                             echo=bool(b.echo), logprobs=b.logprobs, score_decode_from=b.score_decode_from)


def _common(b: _Sampling, max_tokens: int | None) -> dict:
    stop = () if b.stop is None else (b.stop,) if isinstance(b.stop, str) else tuple(b.stop)
    sampling = SamplingParams(
        temperature=1.0 if b.temperature is None else b.temperature,
        top_p=1.0 if b.top_p is None else b.top_p,
        top_k=max(b.top_k or 0, 0),
        min_p=b.min_p or 0.0,
        repetition_penalty=1.0 if b.repetition_penalty is None else b.repetition_penalty,
        presence_penalty=b.presence_penalty or 0.0,
        frequency_penalty=b.frequency_penalty or 0.0,
        seed=b.seed,
    )
    return dict(model=b.model, max_tokens=max_tokens, sampling=sampling, stop=stop, stream=bool(b.stream),
                include_usage=bool(b.stream_options and b.stream_options.include_usage),
                ignore_eos=bool(b.ignore_eos), tokens_as_ids=bool(b.return_tokens_as_token_ids))


def _validate(model: type[_Body], body: Any) -> Any:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    _check_unicode(body)
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        raise ApiError(400, _message(error), param=_param(error["loc"])) from None


def _check_unicode(value: Any, where: str = "body") -> None:
    """JSON may carry lone surrogates, which no tokenizer takes: refuse them by name."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ApiError(400, f"'{where}' is not valid Unicode (a lone surrogate at {exc.start})",
                           param=where) from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_unicode(key, where)
            _check_unicode(item, key if where == "body" else where)
    elif isinstance(value, list):
        for item in value:
            _check_unicode(item, where)


_TYPE_NAMES = {"int": "an integer", "float": "a number", "string": "a string", "bool": "a boolean",
               "dict": "an object", "list": "a list", "model": "an object", "literal": "one of the allowed values"}


def _param(loc: tuple) -> str:
    """`messages[1].role` from pydantic's location, leaving out union-branch labels."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif str(part).startswith(("function-", "constrained-", "list[", "str", "int", "dict[", "_TextPart")) or \
                part in ("str", "int", "float", "bool"):
            continue
        else:
            out += ("." if out else "") + str(part)
    return out or "body"


def _message(error: dict) -> str:
    name, kind, ctx, value = _param(error["loc"]), error["type"], error.get("ctx") or {}, error.get("input")
    if name == "messages" and kind in ("too_short", "list_type"):
        return "'messages' must be a non-empty list"
    if name.endswith(".role") and kind == "literal_error":
        return f"{name} must be one of {', '.join(ROLES)}, got {value!r:.50}"
    if kind == "finite_number":
        return f"'{name}' must be a finite number, got {value}"
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        bounds = {"greater_than_equal": "at least", "less_than_equal": "at most", "greater_than": "more than",
                  "less_than": "less than"}
        limit = next(iter(ctx.values()), "")
        return f"'{name}' must be {bounds[kind]} {limit}, got {value!r:.50}"
    if kind.endswith("_type") or kind.endswith("_parsing"):
        expected = _TYPE_NAMES.get(kind.split("_")[0], kind.split("_")[0])
        return f"'{name}' must be {expected}, got {type(value).__name__}: {value!r:.100}"
    if kind == "value_error":  # the validators' own messages name their field
        return error["msg"].removeprefix("Value error, ")
    if kind in ("too_short", "too_long", "string_too_short"):
        return f"'{name}' {error['msg'].lower()}"
    if kind == "missing":
        return f"'{name}' is required"
    return f"'{name}': {error['msg']}"
