"""The real server process on the tiny model, over real HTTP."""

import asyncio
import json
import math
import time

import httpx
import pytest

pytestmark = pytest.mark.slow


def _chat(url, **body):
    body.setdefault("messages", [{"role": "user", "content": "What is 2 + 3?"}])
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=120)


def _sse_events(response):
    events = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            payload = line[len("data: "):]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def test_health_and_models(tiny_server):
    assert httpx.get(tiny_server.url + "/health").json() == {"status": "ok"}
    models = httpx.get(tiny_server.url + "/v1/models").json()
    assert models["data"][0]["id"] == "tiny" and models["data"][0]["max_model_len"] == 32768


def test_chat_non_streaming_greedy_is_deterministic_and_reports_usage(tiny_server):
    a = _chat(tiny_server.url, temperature=0, max_tokens=12, chat_template_kwargs={"enable_thinking": False})
    b = _chat(tiny_server.url, temperature=0, max_tokens=12, chat_template_kwargs={"enable_thinking": False})
    assert a.status_code == 200, a.text
    body = a.json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"] == b.json()["choices"][0]["message"]
    usage = body["usage"]
    assert usage["completion_tokens"] <= 12 and usage["prompt_tokens"] > 5
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0
    assert usage["timings"]["prefill_s"] > 0 and usage["timings"]["decode_s"] >= 0
    assert body["choices"][0]["finish_reason"] in ("stop", "length")


def test_chat_streaming_ends_with_usage_chunk_and_done(tiny_server):
    body = {"messages": [{"role": "user", "content": "Hi"}], "temperature": 0, "max_tokens": 8, "stream": True,
            "stream_options": {"include_usage": True}, "ignore_eos": True}
    with httpx.stream("POST", tiny_server.url + "/v1/chat/completions", json=body, timeout=120) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        events = _sse_events(r)
    assert events[-1] == "[DONE]"
    usage_chunk = events[-2]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == 8
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    assert events[-3]["choices"][0]["finish_reason"] == "length"
    streamed = "".join(e["choices"][0]["delta"].get("reasoning_content", "") + e["choices"][0]["delta"].get("content", "")
                       for e in events[:-2])
    whole = _chat(tiny_server.url, messages=body["messages"], temperature=0, max_tokens=8, ignore_eos=True).json()
    message = whole["choices"][0]["message"]
    assert streamed == message.get("reasoning_content", "") + message["content"]


def test_thinking_goes_to_reasoning_content(tiny_server):
    on = _chat(tiny_server.url, temperature=0, max_tokens=6, ignore_eos=True).json()["choices"][0]["message"]
    off = _chat(tiny_server.url, temperature=0, max_tokens=6, ignore_eos=True,
                chat_template_kwargs={"enable_thinking": False}).json()["choices"][0]["message"]
    # The template opens <think> when thinking is on: the random model's words are reasoning until </think>.
    assert on.get("reasoning_content") and "<think>" not in on["content"]
    assert "reasoning_content" not in off and off["content"]


def test_completions_echo_logprobs_match_generation_logprobs(tiny_server):
    url = tiny_server.url
    prompt = "The answer is"
    gen = httpx.post(url + "/v1/completions", json={"prompt": prompt, "max_tokens": 6, "temperature": 0,
                                                    "logprobs": 3, "ignore_eos": True,
                                                    "return_tokens_as_token_ids": True}, timeout=60).json()
    gen_lp = gen["choices"][0]["logprobs"]
    gen_ids = [int(t.split(":")[1]) for t in gen_lp["tokens"]]
    prompt_ids = [int(t.split(":")[1]) for t in httpx.post(url + "/v1/completions", json={
        "prompt": prompt, "max_tokens": 0, "echo": True, "logprobs": 0, "return_tokens_as_token_ids": True},
        timeout=60).json()["choices"][0]["logprobs"]["tokens"]]
    scored = httpx.post(url + "/v1/completions", json={
        "prompt": prompt_ids + gen_ids, "max_tokens": 0, "echo": True, "logprobs": 3,
        "score_decode_from": len(prompt_ids), "return_tokens_as_token_ids": True}, timeout=60).json()
    lp = scored["choices"][0]["logprobs"]
    assert lp["token_logprobs"][: len(prompt_ids)] == [None] * len(prompt_ids)
    teacher = lp["token_logprobs"][len(prompt_ids):]
    assert all(math.isclose(a, b, abs_tol=1e-4) for a, b in zip(teacher, gen_lp["token_logprobs"], strict=True))
    # greedy: each generated token is the top-1 of its position
    for token, top in zip(lp["tokens"][len(prompt_ids):], lp["top_logprobs"][len(prompt_ids):], strict=True):
        assert max(top, key=top.get) == token and len(top) == 3
    full = httpx.post(url + "/v1/completions", json={"prompt": prompt_ids + gen_ids, "max_tokens": 0, "echo": True,
                                                     "logprobs": 1}, timeout=60).json()
    full_lp = full["choices"][0]["logprobs"]["token_logprobs"]
    assert full_lp[0] is None and all(x is not None for x in full_lp[1:])
    assert scored["usage"]["completion_tokens"] == 0


def test_chat_logprobs(tiny_server):
    body = _chat(tiny_server.url, temperature=0, max_tokens=4, logprobs=True, top_logprobs=2, ignore_eos=True).json()
    content = body["choices"][0]["logprobs"]["content"]
    assert len(content) == 4
    assert all(len(c["top_logprobs"]) == 2 and c["logprob"] <= 0 for c in content)


def test_seeded_sampling_is_reproducible(tiny_server):
    kw = dict(temperature=1.0, top_p=0.9, top_k=50, min_p=0.01, seed=7, max_tokens=10, ignore_eos=True)
    a = _chat(tiny_server.url, **kw).json()["choices"][0]["message"]
    b = _chat(tiny_server.url, **kw).json()["choices"][0]["message"]
    assert a == b


def test_stop_string_ends_generation(tiny_server):
    base = _chat(tiny_server.url, temperature=0, max_tokens=20, ignore_eos=True,
                 chat_template_kwargs={"enable_thinking": False}).json()["choices"][0]["message"]["content"]
    assert len(base) > 4
    stop = base[2:4]
    cut = _chat(tiny_server.url, temperature=0, max_tokens=20, ignore_eos=True, stop=[stop],
                chat_template_kwargs={"enable_thinking": False}).json()["choices"][0]
    assert cut["finish_reason"] == "stop"
    assert cut["message"]["content"] == base[: base.index(stop)]


@pytest.mark.parametrize(
    "body, status, fragment",
    [
        ({"messages": "hi"}, 400, "'messages' must be a non-empty list"),
        ({"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}, 400, "'temperature' must be"),
        ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": -1}, 400, "'max_tokens'"),
        ({"messages": [{"role": "user", "content": "hi"}], "model": "gpt-4"}, 404, "does not exist"),
        ({"messages": [{"role": "user", "content": "hi"}], "n": 2}, 400, "only n=1"),
        ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 10**6}, 400, "exceeds the context window"),
        ({"messages": [{"role": "user", "content": "hi " * 40000}]}, 400, "context window"),
    ],
)
def test_bad_requests_get_openai_errors_and_the_server_keeps_serving(tiny_server, body, status, fragment):
    r = httpx.post(tiny_server.url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert fragment in error["message"] and error["type"]
    assert _chat(tiny_server.url, temperature=0, max_tokens=2).status_code == 200


def test_malformed_json_is_a_400(tiny_server):
    r = httpx.post(tiny_server.url + "/v1/completions", content=b"{not json", timeout=30,
                   headers={"content-type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
    r = httpx.post(tiny_server.url + "/v1/completions", json={"prompt": [1, 2, 99999], "max_tokens": 1}, timeout=30)
    assert r.status_code == 400 and "token ids" in r.json()["error"]["message"]


def test_two_concurrent_streams_interleave_and_both_finish(tiny_server):
    async def one(client, seed):
        body = {"messages": [{"role": "user", "content": f"Count {seed}"}], "temperature": 0, "max_tokens": 30,
                "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
        stamps = []
        async with client.stream("POST", tiny_server.url + "/v1/chat/completions", json=body) as r:
            async for line in r.aiter_lines():
                if line.startswith("data: {"):
                    stamps.append(time.perf_counter())
                    last = json.loads(line[6:])
        return stamps, last["usage"]["completion_tokens"]

    async def both():
        async with httpx.AsyncClient(timeout=120) as client:
            return await asyncio.gather(one(client, 1), one(client, 2))

    (a, na), (b, nb) = asyncio.run(both())
    assert na == nb == 30
    assert a[0] < b[-1] and b[0] < a[-1]  # overlapping in time: neither waited for the other to finish


def test_client_disconnect_cancels_the_job(tiny_server):
    info = httpx.get(tiny_server.url + "/v1/server_info").json()
    before = info["jobs_cancelled"]
    body = {"messages": [{"role": "user", "content": "Go on"}], "max_tokens": 5000, "ignore_eos": True,
            "temperature": 0, "stream": True}
    with httpx.stream("POST", tiny_server.url + "/v1/chat/completions", json=body, timeout=60) as r:
        for i, _ in enumerate(r.iter_lines()):
            if i > 6:
                break  # leave mid-stream
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        info = httpx.get(tiny_server.url + "/v1/server_info").json()
        if info["jobs_cancelled"] > before and info["jobs_in_flight"] == 0:
            break
        time.sleep(0.2)
    assert info["jobs_cancelled"] > before and info["jobs_in_flight"] == 0


def test_non_streaming_disconnect_cancels_too(tiny_server):
    before = httpx.get(tiny_server.url + "/v1/server_info").json()["jobs_cancelled"]
    with pytest.raises(httpx.ReadTimeout):
        _chat_timeout = httpx.post(tiny_server.url + "/v1/chat/completions", timeout=1.5, json={
            "messages": [{"role": "user", "content": "Go on"}], "max_tokens": 5000, "ignore_eos": True})
        del _chat_timeout
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        info = httpx.get(tiny_server.url + "/v1/server_info").json()
        if info["jobs_cancelled"] > before and info["jobs_in_flight"] == 0:
            break
        time.sleep(0.2)
    assert info["jobs_cancelled"] > before and info["jobs_in_flight"] == 0


def test_server_info_names_config_and_engine(tiny_server):
    info = httpx.get(tiny_server.url + "/v1/server_info").json()
    assert info["engine"] == "transformers" and info["config"]["engine"] == "transformers"
    assert len(info["config_digest"]) == 64 and info["torch_version"]


def test_auth_accepted_and_refused(keyed_server):
    url = keyed_server.url
    assert httpx.get(url + "/health").status_code == 200  # health needs no key
    assert httpx.get(url + "/v1/models").status_code == 401
    wrong = httpx.get(url + "/v1/models", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
    ok = httpx.get(url + "/v1/models", headers={"Authorization": "Bearer test-key-123"})
    assert ok.status_code == 200 and ok.json()["data"][0]["id"] == "tiny-keyed"
    assert "test-key-123" not in keyed_server.log_tail()


def test_prompt_over_a_small_context_window(keyed_server):
    headers = {"Authorization": "Bearer test-key-123"}
    r = httpx.post(keyed_server.url + "/v1/completions", headers=headers,
                   json={"prompt": list(range(600)), "max_tokens": 1}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    r = httpx.post(keyed_server.url + "/v1/completions", headers=headers,
                   json={"prompt": list(range(100)), "max_tokens": 500}, timeout=30)
    assert r.status_code == 400 and "max_tokens 500" in r.json()["error"]["message"]
