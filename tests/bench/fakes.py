"""Test doubles at bench's outside boundaries: a server with a prefix cache, and NVML.

`PrefixCachingFakeServer` speaks just enough streaming OpenAI chat to be measured, and reports
`cached_tokens` the way a prefix cache would (exllamav3, vLLM blocks): the longest prefix of the
templated prompt shared with any earlier one, in whole pages (`page_tokens=1`: token-exact, as
exllamav3 reports). With `system_prompt` its chat template opens every prompt with the same system
message, as Qwen2.5's does, so a real cache finds that opening in every prompt. It lets a test show
that bench's prompts defeat such a cache beyond the opening and that bench flags a hit when prompts
repeat. `answer_tokens` makes every answer end (at its EOS) after that many tokens unless the
request sends ignore_eos, as a model that answers briefly does. `stall_posts` makes chosen
requests stall before answering, as a first-time kernel compile does on a GPU server. `token_gap_s`
scripts the time between streamed tokens by request number (1-based), so decode can speed up over a
launch's first requests as a warming GPU's does.

`FakeNvml` stands in for the pynvml module (no GPU here; tests/gpu/fakes.py's `FakePynvml` for one
GPU): a test puts it where gpu.device imports pynvml. It reports a busy GPU, and an idle one while
the fake server stalls.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.gpu.fakes import FakeGpu, FakePynvml

CHARS_PER_TOKEN = 4
PAGE_TOKENS = 16


class PrefixCachingFakeServer:
    """A loopback HTTP server on a free port; use as a context manager, read `.url`."""

    def __init__(
        self,
        api_key: str | None = None,
        *,
        stall_posts: frozenset[int] = frozenset(),
        stall_s: float = 0.3,
        system_prompt: str | None = None,
        page_tokens: int = PAGE_TOKENS,
        decode_ends_after: int | None = None,
        answer_tokens: int | None = None,
        loading_s: float = 0.0,
        token_gap_s: Callable[[int], float] | None = None,
        answers: Callable[[int], int] | None = None,
    ) -> None:
        self.answers = answers  # the answer's length by request number (1-based), where answer_tokens is one length
        self.token_gap_s = token_gap_s or (lambda _post: 0.001)
        self.loaded_at = time.monotonic() + loading_s  # before it: 503 "loading", as this project's server answers
        self.api_key = api_key
        self.decode_ends_after = decode_ends_after  # end multi-token answers early, as a server ignoring ignore_eos
        self.answer_tokens = answer_tokens  # the model's answers end here (EOS) unless ignore_eos is sent
        self.system_prompt = system_prompt
        self.page_tokens = page_tokens
        self.stall_posts = stall_posts  # 1-based numbers of the POSTs that stall
        self.stall_s = stall_s
        self.stalling = False
        self.stalled_prompts: list[str] = []
        self.bodies: list[dict] = []
        self.prompts: list[str] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> PrefixCachingFakeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    def cached_tokens(self, prompt: str) -> int:
        with self._lock:
            shared = max((_common_prefix(prompt, p) for p in self.prompts), default=0)
            self.prompts.append(prompt)
        return (shared // CHARS_PER_TOKEN) // self.page_tokens * self.page_tokens

    def refusal(self) -> tuple[int, dict]:
        if time.monotonic() < self.loaded_at:
            return 503, {"status": "loading"}
        return 401, {"error": {"message": "invalid API key", "type": "authentication_error"}}

    def templated(self, content: str, system: str | None = None) -> str:
        """ChatML, as Qwen2.5's template writes it: the request's system prompt, else the default one if set."""
        system = system or self.system_prompt
        system = f"<|im_start|>system\n{system}<|im_end|>\n" if system else ""
        return f"{system}<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # quiet
                pass

            def _authorized(self) -> bool:  # and loaded: before, 503 "loading", as this project's server answers
                if fake.loaded_at <= time.monotonic() and (
                        fake.api_key is None or self.headers.get("Authorization") == f"Bearer {fake.api_key}"):
                    return True
                self._json(*fake.refusal())
                return False

            def do_GET(self) -> None:
                if not self._authorized():
                    return
                if self.path == "/v1/models":
                    self._json(200, {"object": "list", "data": [{"id": "fake", "object": "model"}]})
                else:
                    self._json(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if not self._authorized():
                    return
                fake.bodies.append(body)
                received = time.perf_counter()
                messages = body["messages"]
                prompt = messages[-1]["content"]
                system = next((m["content"] for m in messages if m["role"] == "system"), None)
                if len(fake.bodies) in fake.stall_posts:
                    fake.stalled_prompts.append(prompt)
                    fake.stalling = True
                    time.sleep(fake.stall_s)
                    fake.stalling = False
                text = fake.templated(prompt, system)
                cached = fake.cached_tokens(text)
                prompt_tokens = len(text) // CHARS_PER_TOKEN
                time.sleep(2e-6 * (prompt_tokens - cached))  # "prefill" only what is not cached
                prefill_s = time.perf_counter() - received  # a stall is inside it, as a kernel compile is
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                n, finish = body["max_tokens"], "length"
                if fake.decode_ends_after is not None and n > 1 and n > fake.decode_ends_after:
                    n, finish = fake.decode_ends_after, "stop"
                answer = fake.answers(len(fake.bodies)) if fake.answers else fake.answer_tokens
                if answer is not None and n > answer and not body.get("ignore_eos"):
                    n, finish = answer, "stop"
                gap = fake.token_gap_s(len(fake.bodies))
                for _ in range(n):
                    time.sleep(gap)
                    self._event(
                        {"choices": [{"index": 0, "delta": {"content": " tok"}, "finish_reason": None}]}
                    )
                usage = {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": n,
                    "prompt_tokens_details": {"cached_tokens": cached},
                    "timings": {"queue_s": 0.0, "prefill_s": prefill_s, "decode_s": gap * n},
                }
                self._event({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
                self._event({"choices": [], "usage": usage})
                self.wfile.write(b"data: [DONE]\n\n")

            def _event(self, data: dict) -> None:
                self.wfile.write(f"data: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()

            def _json(self, status: int, data: dict) -> None:
                raw = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        return Handler


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class FakeNvml(FakePynvml):
    """Test double of pynvml: one pretend H200 running the fake server, busy but idle while it stalls."""

    def __init__(self, server: PrefixCachingFakeServer) -> None:
        super().__init__([FakeGpu(pids=(1,))])  # one compute process: the server
        self.server = server

    def nvmlDeviceGetUtilizationRates(self, handle):
        rates = super().nvmlDeviceGetUtilizationRates(handle)
        rates.gpu = 5 if self.server.stalling else 80
        return rates
