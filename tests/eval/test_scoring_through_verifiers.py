"""Rewards really flow: a scripted server that answers correctly scores 1.0 through the whole verifiers path.

The tiny model is random (reward ~0), so this is the test that would catch a scorer stuck at zero. The
scripted server is a fake at the outside boundary (`ScriptedChatServer`); it also records each request
body, which pins what goes on the wire: greedy sampling, thinking on, streaming with a usage chunk.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from eval.locks import load_locks
from eval.run_config import Endpoint, build_launch
from eval.runner import run_taskset
from eval.snapshots import EvalPaths
from eval.suites import SuiteOverrides, apply_overrides, get_suite
from tests.eval.test_tasksets import load_offline_tasks

pytestmark = pytest.mark.slow


class ScriptedChatServer:
    """Answers each user prompt with a scripted reply; records request bodies."""

    def __init__(self, replies: dict[str, str]):
        self.replies = replies
        self.bodies: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.bodies.append(body)
                prompt = body["messages"][-1]["content"]
                reply = outer.replies.get(prompt, "I do not know.")
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                base = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": body["model"]}
                for chunk in (
                    {
                        "choices": [
                            {
                                "index": 0,
                                "delta": {"role": "assistant", "content": reply},
                                "finish_reason": None,
                            }
                        ]
                    },
                    {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                    {
                        "choices": [],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
                    },
                ):
                    self.wfile.write(f"data: {json.dumps({**base, **chunk})}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _run(name: str, replies: dict[str, str], tmp_path, limit: int):
    server = ScriptedChatServer(replies)
    try:
        suite = apply_overrides(
            get_suite("offline"), SuiteOverrides(limit=limit, max_tokens=64, tasksets=(name,))
        )
        launch = build_launch(
            suite,
            suite.tasksets[0],
            Endpoint(base_url=server.url, model="scripted"),
            locks=load_locks(),
            paths=EvalPaths(tmp_path),
            run_dir=tmp_path / "run",
        )
        return run_taskset(launch, tmp_path / "run"), server.bodies
    finally:
        server.close()


def test_correct_math_answers_score_one_and_the_wire_carries_greedy_thinking_sampling(tmp_path):
    tasks = load_offline_tasks({"id": "eval-mmath", "data_source": "MATH500"}, limit=2)
    replies = {
        tasks[0].data.prompt: f"So the answer is \\boxed{{{tasks[0].data.answer}}}.",
        tasks[1].data.prompt: "\\boxed{x}",
    }
    result, bodies = _run("mmath-math500", replies, tmp_path, limit=2)
    assert (result.rollouts, result.failures, result.reward_mean) == (2, 0, 0.5)
    by_key = {e.task_key: e.reward for e in result.episodes}
    assert by_key == {tasks[0].key: 1.0, tasks[1].key: 0.0}
    body = bodies[0]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert (body["temperature"], body["top_p"], body["max_tokens"]) == (0.0, 1.0, 64)
    assert (body["min_p"], body["repetition_penalty"], body["presence_penalty"]) == (0.0, 1.0, 0.0)
    assert body["chat_template_kwargs"] == {"enable_thinking": True}
    assert "top_k" not in body  # no top-k


def test_correct_logic_answers_score_one(tmp_path):
    tasks = load_offline_tasks({"id": "eval-logic"}, limit=3)
    replies = {t.data.prompt: f"<answer>{t.data.answer}</answer>" for t in tasks}
    result, bodies = _run("rg-logic", replies, tmp_path, limit=3)
    assert (result.rollouts, result.failures, result.reward_mean) == (3, 0, 1.0)
    assert bodies[0]["messages"][0]["role"] == "system" and "<answer>" in bodies[0]["messages"][0]["content"]
