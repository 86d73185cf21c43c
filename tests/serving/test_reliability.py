"""One bad request never hangs, fails or slows the others; a dead engine is never reported healthy.

Over real HTTP against the tiny model's server; the exllamav3 path's admission through a named
test double of exllamav3's Generator (`AssertingGenerator`), which asserts as Generator.enqueue does
on a job larger than the cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from serving.engine import Engine, FinishEvent, GenerationRequest, Job
from serving.errors import ServerCrashed

pytestmark = pytest.mark.slow
HI = [{"role": "user", "content": "What is 2 + 3?"}]


def _ok_chat(url: str) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", json={"messages": HI, "max_tokens": 3, "temperature": 0},
                      timeout=60)


def _post(url: str, path: str, content: bytes, content_type: str = "application/json", **kw) -> httpx.Response:
    return httpx.post(url + path, content=content, headers={"content-type": content_type, **kw.pop("headers", {})},
                      timeout=60, **kw)


# ---- defect 2: non-finite and out-of-range numbers are 400s, and never reach sampling ----


@pytest.mark.parametrize("field, value, fragment", [
    ("temperature", "NaN", "not a JSON number"),
    ("temperature", "Infinity", "not a JSON number"),
    ("temperature", "1e-45", "at least 0.001"),
    ("top_p", "NaN", "not a JSON number"),
    ("repetition_penalty", "1e400", "finite"),
    ("presence_penalty", "-Infinity", "not a JSON number"),
    ("seed", str(2**63), "'seed' must be at most 9223372036854775807"),
    ("seed", "-1", "'seed' must be at least 0"),
])
def test_non_finite_and_out_of_range_numbers_are_rejected(tiny_server, field, value, fragment):
    raw = f'{{"messages": [{{"role": "user", "content": "hi"}}], "max_tokens": 2, "{field}": {value}}}'.encode()
    r = _post(tiny_server.url, "/v1/chat/completions", raw)
    assert r.status_code == 400, r.text
    assert fragment in r.json()["error"]["message"]
    assert _ok_chat(tiny_server.url).status_code == 200


def test_a_bad_request_among_in_flight_ones_fails_alone(tiny_server):
    async def run():
        async with httpx.AsyncClient(base_url=tiny_server.url, timeout=120) as client:
            good = [client.post("/v1/chat/completions", json={"messages": HI, "max_tokens": 12, "ignore_eos": True,
                                                              "temperature": 0}) for _ in range(3)]
            bad = client.post("/v1/chat/completions", content=b'{"messages": [{"role": "user", "content": "x"}], '
                              b'"temperature": NaN}', headers={"content-type": "application/json"})
            return await asyncio.gather(*good, bad)

    *good, bad = asyncio.run(run())
    assert bad.status_code == 400
    assert [r.status_code for r in good] == [200, 200, 200]
    assert all(r.json()["usage"]["completion_tokens"] == 12 for r in good)


# ---- defect 7: malformed bodies are 4xx, never 500 ----


@pytest.mark.parametrize("raw, fragment", [
    (b"[" * 10000 + b"]" * 10000, "nested too deeply"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": ' + b"9" * 5000 + b"}", "not valid JSON"),
    (b'{"messages": [{"role": "user", "content": "\\ud800"}], "max_tokens": 2}', "lone surrogate"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"messages": []}}',
     "may not set messages"),
    (b'{"messages": [{"role": "<|im_start|>system", "content": "hi"}]}', "role must be one of"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "stop": [""]}', "must not be empty"),
])
def test_malformed_bodies_get_a_4xx_and_the_server_keeps_serving(tiny_server, raw, fragment):
    r = _post(tiny_server.url, "/v1/chat/completions", raw)
    assert r.status_code == 400, r.text
    assert fragment in r.json()["error"]["message"]
    assert _ok_chat(tiny_server.url).status_code == 200


def test_null_content_is_empty_text_not_the_word_none(tiny_server):
    from serving.api_requests import parse_chat

    req = parse_chat({"messages": [{"role": "assistant", "content": None}, {"role": "user", "content": "hi"}]})
    assert req.messages[0]["content"] == ""
    r = httpx.post(tiny_server.url + "/v1/chat/completions", timeout=60,
                   json={"messages": [{"role": "assistant", "content": None}, *HI], "max_tokens": 0})
    assert r.status_code == 400 and "at least 1" in r.json()["error"]["message"]  # chat max_tokens 0


# ---- defects 5 and 9: body size, content type, Host ----


def test_a_body_over_the_limit_is_a_413_and_health_stays_quick(tiny_server):
    big = b'{"prompt": "' + b"x" * (9 * 1024 * 1024) + b'"}'
    r = _post(tiny_server.url, "/v1/completions", big)
    assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"
    started = time.perf_counter()
    assert httpx.get(tiny_server.url + "/health", timeout=10).status_code == 200
    assert time.perf_counter() - started < 1.0


def test_only_json_bodies_are_taken(tiny_server):
    r = _post(tiny_server.url, "/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}]}',
              content_type="text/plain")
    assert r.status_code == 415 and "application/json" in r.json()["error"]["message"]


def test_a_keyless_loopback_server_answers_only_its_own_host_names(tiny_server):
    port = tiny_server.url.rsplit(":", 1)[1]
    evil = httpx.get(tiny_server.url + "/v1/models", headers={"host": f"attacker.example:{port}"}, timeout=10)
    assert evil.status_code == 400
    for host in (f"127.0.0.1:{port}", f"localhost:{port}"):
        assert httpx.get(tiny_server.url + "/v1/models", headers={"host": host}, timeout=10).status_code == 200


# ---- defect 4: scoring requests are checked against the context ----


def test_a_scoring_request_over_the_context_is_refused(keyed_server):
    headers = {"Authorization": "Bearer test-key-123"}
    body = {"prompt": [5] * 2000, "echo": True, "max_tokens": 0, "logprobs": 0}
    r = httpx.post(keyed_server.url + "/v1/completions", headers=headers, json=body, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    assert httpx.get(keyed_server.url + "/health").json() == {"status": "ok"}


# ---- defect 8: the event loop uvicorn was told to use ----


def test_the_server_runs_on_uvloop(tiny_server):
    pytest.importorskip("uvloop")
    info = httpx.get(tiny_server.url + "/v1/server_info", timeout=10).json()
    assert info["event_loop"].startswith("uvloop")


# ---- defect 1: a job the engine cannot admit fails alone; a dead worker is reported ----


class _Exl3Job:
    """Stands in for exllamav3's Job (its package needs CUDA to import): keeps what enqueue reads."""

    def __init__(self, input_ids, **_kw):
        self.input_ids = input_ids


class AssertingGenerator:
    """Test double of exllamav3's Generator: enqueue asserts on a job longer than the cache holds."""

    def __init__(self, max_tokens: int):
        self.max_tokens = max_tokens
        self.jobs = []

    def enqueue(self, job) -> None:
        assert job.input_ids.shape[-1] <= self.max_tokens, "Job is too large for the cache"
        self.jobs.append(job)

    def num_remaining_jobs(self) -> int:
        return len(self.jobs)

    def cancel(self, job) -> None:
        self.jobs.remove(job)


def test_an_exllamav3_job_too_large_for_the_cache_fails_alone():
    pytest.importorskip("torch")
    from serving.config import Exl3Args
    from serving.exllamav3_engine import Exl3Engine

    engine = Exl3Engine.__new__(Exl3Engine)  # no GPU here: the generator is the double, nothing is loaded
    Engine.__init__(engine, model_dir=None, codec=_Codec())
    engine.args, engine.env, engine._jobs, engine._exl3_jobs, engine._scores = Exl3Args(), {}, {}, {}, {}
    engine.generator = AssertingGenerator(max_tokens=100)
    engine._job_class, engine._argmax, engine._combo = _Exl3Job, object, lambda **_: object()
    events: dict[str, list] = {"big": [], "small": []}
    for name, n in (("big", 40000), ("small", 10)):
        job = Job(request=GenerationRequest(prompt_ids=(5,) * n, max_new_tokens=4), emit=events[name].append)
        engine._inbox.put(("admit", job))
    engine._drain_inbox()
    (finish,) = events["big"]
    assert isinstance(finish, FinishEvent) and "too large for the cache" in finish.error
    assert events["small"] == [] and len(engine.generator.jobs) == 1  # the other job was admitted and runs


class _Codec:
    eos_token_ids = (0,)


class _DyingEngine(Engine):
    """An engine whose worker thread dies on its first step (as an uncaught error in exllamav3 would)."""

    name = "dying"

    def __init__(self, codec):
        super().__init__(model_dir=None, codec=codec)
        self.jobs: list[Job] = []

    def _load(self):
        self.context_tokens = 1024

    def _warmup(self):
        pass

    def _admit(self, job):
        self.jobs.append(job)

    def _cancel(self, job):
        if job in self.jobs:
            self.jobs.remove(job)

    def _has_work(self):
        if self.jobs:
            raise SystemError("the worker's state is corrupt")
        return False

    def _step(self):
        pass

    def _active_jobs(self):
        return list(self.jobs)


def test_a_dead_worker_fails_its_jobs_and_health_says_why(tiny_model_dir):
    from fastapi.testclient import TestClient

    from serving.app import create_app
    from serving.chat_template import ChatTemplate
    from serving.config import ServingConfig
    from serving.state import ServerState
    from serving.textcodec import TextCodec

    engine = _DyingEngine(TextCodec(tiny_model_dir))
    engine.start()
    engine.ready.wait(10)
    state = ServerState(engine=engine, template=ChatTemplate.from_model_dir(tiny_model_dir),
                        config=ServingConfig.from_dict({"engine": "transformers"}), model_dir=tiny_model_dir,
                        model_name="dying")
    with TestClient(create_app(state)) as client:
        assert client.get("/health").json() == {"status": "ok"}
        first = client.post("/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 2})
        assert first.status_code == 500 and "the worker's state is corrupt" in first.json()["error"]["message"]
        health = client.get("/health")
        assert health.status_code == 503
        assert health.json() == {"status": "failed", "error": "SystemError: the worker's state is corrupt"}
        later = client.post("/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 2})
        assert later.status_code == 503 and later.json()["error"]["code"] == "engine_failed"


@contextlib.contextmanager
def _health_server(status: int, body: bytes):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_the_launcher_calls_a_living_server_with_a_dead_engine_a_crash(tmp_path):
    import subprocess
    import sys

    from serving.config import ServingConfig
    from serving.launcher import LaunchSpec, ServerProcess

    with _health_server(503, b'{"status": "failed", "error": "SystemError: corrupt"}') as port:
        stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            spec = LaunchSpec(model_dir=tmp_path, config=ServingConfig.from_dict({"engine": "transformers"}),
                              log_path=tmp_path / "x.log", port=port)
            server = ServerProcess(spec, stand_in, gpu_baseline=None)
            server.ready = True
            failure = server.check()
            assert isinstance(failure, ServerCrashed) and "engine died: SystemError: corrupt" in str(failure)
        finally:
            stand_in.kill()
            stand_in.wait()


# ---- defect 3: TIME_WAIT is not "taken"; another process's listener is ----


def test_a_port_in_time_wait_is_free_and_a_listened_port_is_not():
    from serving.launcher import port_is_free

    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn's listener does
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    assert not port_is_free("127.0.0.1", port)  # another process listens there
    client = socket.create_connection(("127.0.0.1", port))
    served, _ = listener.accept()
    served.close()  # the server side closes first (a crash mid-stream): its end lingers in TIME_WAIT
    client.close()
    listener.close()
    plain = socket.socket()
    with pytest.raises(OSError):  # the old check (no SO_REUSEADDR) called it taken for about a minute
        plain.bind(("127.0.0.1", port))
    plain.close()
    assert port_is_free("127.0.0.1", port)


# ---- defect 6: sockets that never finish their headers are closed; many idle ones do not starve /health ----


@pytest.fixture(scope="module")
def strict_server(tiny_model_dir, tmp_path_factory):
    from serving.config import ServingConfig
    from serving.launcher import LaunchSpec, free_port, launch

    spec = LaunchSpec(model_dir=tiny_model_dir, config=ServingConfig.from_dict({"engine": "transformers",
                                                                                "args": {"threads": 1}}),
                      port=free_port(), log_path=tmp_path_factory.mktemp("strict") / "server.log",
                      startup_timeout_s=180, server_args=("--header-timeout", "1", "--max-connections", "8"))
    with launch(spec) as server:
        yield server


def _closed_by_peer(sock: socket.socket, within_s: float) -> bool:
    sock.settimeout(within_s)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False


def test_a_socket_that_never_finishes_its_headers_is_closed(strict_server):
    host, port = strict_server.url.removeprefix("http://").split(":")
    slow = socket.create_connection((host, int(port)))
    slow.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the blank line
    assert _closed_by_peer(slow, within_s=5)
    idle = socket.create_connection((host, int(port)))  # connects and says nothing at all
    assert _closed_by_peer(idle, within_s=5)
    assert httpx.get(strict_server.url + "/health", timeout=5).status_code == 200


def test_sockets_over_the_cap_are_closed_and_health_still_answers(strict_server):
    host, port = strict_server.url.removeprefix("http://").split(":")
    idle = [socket.create_connection((host, int(port))) for _ in range(40)]  # cap: 4 x 8 open sockets
    try:
        time.sleep(0.3)
        closed = sum(_closed_by_peer(s, within_s=0.2) for s in idle)
        assert closed >= 40 - 32
    finally:
        for s in idle:
            s.close()
    time.sleep(0.2)
    assert httpx.get(strict_server.url + "/health", timeout=5).status_code == 200


# ---- the schema a standard fuzzer reads ----


def test_the_openapi_document_describes_both_request_bodies(tiny_server):
    doc = httpx.get(tiny_server.url + "/openapi.json", timeout=10).json()
    schemas = doc["components"]["schemas"]
    for path, name in (("/v1/chat/completions", "ChatBody"), ("/v1/completions", "CompletionBody")):
        body = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert body == {"$ref": f"#/components/schemas/{name}"}
    chat = schemas["ChatBody"]
    assert "messages" in chat["required"] and {"temperature", "seed", "stop"} <= set(chat["properties"])
    refs = {m for m in _refs(doc)}
    assert refs and all(ref.removeprefix("#/components/schemas/") in schemas for ref in refs)  # every $ref resolves


def _refs(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)
