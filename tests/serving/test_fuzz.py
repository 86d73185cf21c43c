"""Fuzzing the request schema over real HTTP: no body gets a 5xx, and a well-formed request sent at the
same moment as each one is always served.

Bodies are valid chat and completion requests with one field replaced by an adversarial value
(non-finite and huge numbers, deep nesting, unicode edge cases, wrong types), or adversarial JSON
documents outright, and some huge bodies. The server runs a 512-token context so that no fuzzed
max_tokens can keep it busy for long.
"""

from __future__ import annotations

import json
import os
import threading

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serving.config import ServingConfig
from serving.launcher import LaunchSpec, free_port, launch

pytestmark = pytest.mark.slow
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "150"))

_UNICODE = st.sampled_from(["\ud800", "\udfff", "\x00", "\u202e", "\ufeff", "👩‍👩‍👧", "<|im_start|>", "a" * 5000,
                            "\\u0000", "𝕏" * 100, ""])
_NUMBERS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([10**400, -(10**400), 2**63,
                     -(2**63), 2**64, 1e-45, -0.0, 5e-324]), st.integers())
_LEAVES = st.one_of(st.none(), st.booleans(), _NUMBERS, _UNICODE, st.text(max_size=20))
_VALUES = st.recursive(_LEAVES, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                        st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                       max_leaves=12)

_CHAT_FIELDS = ["messages", "model", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k",
                "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty", "seed", "stop", "stream",
                "stream_options", "logprobs", "top_logprobs", "chat_template_kwargs", "n", "ignore_eos",
                "response_format", "tools", "logit_bias", "enable_thinking"]
_COMPLETION_FIELDS = ["prompt", "model", "max_tokens", "echo", "logprobs", "score_decode_from", "suffix", "stop",
                      "temperature", "seed", "stream", "return_tokens_as_token_ids"]


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


@st.composite
def bodies(draw) -> tuple[str, bytes]:
    kind = draw(st.sampled_from(["chat-field", "completion-field", "message", "document", "deep", "huge"]))
    if kind == "chat-field":
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        body[draw(st.sampled_from(_CHAT_FIELDS))] = draw(_VALUES)
        return "/v1/chat/completions", json.dumps(body, allow_nan=True).encode()
    if kind == "completion-field":
        body = {"prompt": "hi", "max_tokens": 2}
        body[draw(st.sampled_from(_COMPLETION_FIELDS))] = draw(_VALUES)
        return "/v1/completions", json.dumps(body, allow_nan=True).encode()
    if kind == "message":
        message = {"role": draw(st.one_of(st.sampled_from(["user", "system", "assistant"]), _VALUES)),
                   "content": draw(st.one_of(_UNICODE, _VALUES))}
        return "/v1/chat/completions", json.dumps({"messages": [message], "max_tokens": 2}, allow_nan=True).encode()
    if kind == "document":
        return draw(st.sampled_from(["/v1/chat/completions", "/v1/completions"])), \
            json.dumps(draw(_VALUES), allow_nan=True).encode()
    if kind == "deep":
        depth = draw(st.sampled_from([100, 1000, 10_000, 100_000]))
        return "/v1/chat/completions", f'{{"messages": {_deep(depth)}}}'.encode()
    size = draw(st.sampled_from([1 << 20, 9 << 20]))
    return "/v1/completions", json.dumps({"prompt": "x" * size, "max_tokens": 1}).encode()


@pytest.fixture(scope="module")
def fuzz_server(tiny_model_dir, tmp_path_factory):
    config = ServingConfig.from_dict({"engine": "transformers", "args": {"threads": 1, "context_tokens": 512}})
    spec = LaunchSpec(model_dir=tiny_model_dir, config=config, port=free_port(),
                      log_path=tmp_path_factory.mktemp("fuzz") / "server.log", startup_timeout_s=180)
    with launch(spec) as server:
        yield server


def test_no_request_body_gets_a_5xx_and_a_concurrent_good_request_is_served(fuzz_server):
    url = fuzz_server.url
    good_body = {"messages": [{"role": "user", "content": "What is 2 + 3?"}], "max_tokens": 2, "temperature": 0}
    seen: dict[int, int] = {}

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(bodies())
    def one(case: tuple[str, bytes]) -> None:
        path, raw = case
        good: dict[str, httpx.Response] = {}
        thread = threading.Thread(target=lambda: good.update(r=httpx.post(url + "/v1/chat/completions",
                                                                          json=good_body, timeout=60)))
        thread.start()
        r = httpx.post(url + path, content=raw, headers={"content-type": "application/json"}, timeout=60)
        thread.join(60)
        seen[r.status_code] = seen.get(r.status_code, 0) + 1
        assert r.status_code < 500, (path, raw[:300], r.text[:500])
        assert good["r"].status_code == 200, good["r"].text[:500]

    one()
    assert httpx.get(url + "/health", timeout=10).json() == {"status": "ok"}
    assert seen.get(400, 0) > EXAMPLES // 4  # the fuzzer reached validation, not just the happy path
    assert "Traceback" not in fuzz_server.log_tail(200_000)
