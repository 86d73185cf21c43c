"""Rewards really flow: a scripted server that answers correctly scores 1.0 through the whole verifiers path.

The tiny model is random (reward ~0), so this is the test that would catch a scorer stuck at zero. The
scripted server is a fake at the outside boundary (`ScriptedChatServer`); it also records each request
body, which pins what goes on the wire: greedy sampling, thinking on, streaming with a usage chunk.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from eval.decision import TaskPolicy, compare_taskset
from eval.paths import EvalPaths
from eval.prime.locks import load_locks
from eval.run_config import build_launch
from eval.runner import paired_stop_rule, run_taskset
from eval.suites import SuiteOverrides, apply_overrides, get_suite
from openai_client import Endpoint
from tests.eval.test_tasksets import load_offline_tasks

pytestmark = pytest.mark.slow


class ScriptedChatServer:
    """Answers each user prompt with a scripted reply; records request bodies. `delays_s`: a prompt's own delay in
    place of `delay_s` (slow answers finish out of order)."""

    def __init__(self, replies: dict[str, str], delay_s: float = 0.0, delays_s: dict[str, float] | None = None):
        self.replies = replies
        self.delay_s = delay_s
        self.delays_s = delays_s or {}
        self.bodies: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.bodies.append(body)
                prompt = body["messages"][-1]["content"]
                reply = outer.replies.get(prompt, "I do not know.")
                time.sleep(outer.delays_s.get(prompt, outer.delay_s))
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
        # a reply still sleeping for a client that went away is waited for neither by close() nor at exit
        self.server.block_on_close, self.server.daemon_threads = False, True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _run(name: str, replies: dict[str, str], tmp_path, limit: int):
    server = ScriptedChatServer(replies)
    try:
        suite = apply_overrides(
            get_suite("offline-math" if name.startswith("mmath") else "offline"),
            SuiteOverrides(limit=limit, max_tokens=64, tasksets=(name,)),
        )
        launch = build_launch(
            suite,
            suite.tasksets[0],
            Endpoint(url=server.url, model="scripted"),
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


def test_a_candidate_run_stops_as_soon_as_the_sequential_test_decides(tmp_path):
    # A real verifiers worker, paired with a baseline that answered every task; the candidate (scripted,
    # 0.3 s a reply, 8 at a time) answers none: the test rejects it after a handful of tasks, and the
    # worker sends no further task long before the 96 tasks would have finished, answering those in flight.
    # A next chunk of the same answers leaves out the tasks answered and asks each of the others once.
    tasks = load_offline_tasks({"id": "eval-logic", "generators": ["chain_sum"], "size_per_generator": 96}, limit=96)
    suite = apply_overrides(get_suite("offline"), SuiteOverrides(limit=96, max_tokens=64, tasksets=("rg-math",)))
    spec = dataclasses.replace(suite.tasksets[0], knobs=(("generators", ["chain_sum"]), ("size_per_generator", 96)))
    suite = dataclasses.replace(suite, tasksets=(spec,))
    key_of = {t.data.prompt: t.key for t in tasks}

    def run(replies, tag, stop_when=None, answered=frozenset()):
        server = ScriptedChatServer(replies, delay_s=0.3)
        try:
            launch = build_launch(suite, spec, Endpoint(url=server.url, model="scripted"), locks=load_locks(),
                                  paths=EvalPaths(tmp_path), run_dir=tmp_path / tag, answered=answered)
            started = time.monotonic()
            result = run_taskset(launch, tmp_path / tag, stop_when=stop_when)
            return result, time.monotonic() - started, [key_of[b["messages"][-1]["content"]] for b in server.bodies]
        finally:
            server.close()

    baseline, full_s, _ = run({t.data.prompt: f"<answer>{t.data.answer}</answer>" for t in tasks}, "base")
    assert (baseline.rollouts, baseline.accuracy) == (96, 1.0)
    policy = TaskPolicy()
    candidate, stopped_s, asked = run({}, "cand", stop_when=paired_stop_rule(baseline, policy, tasksets=1))
    assert candidate.rollouts < 60 and stopped_s < full_s
    assert sorted(asked) == sorted(e.task_key for e in candidate.episodes)  # no request in flight was dropped
    verdict = compare_taskset(baseline, candidate, policy)
    assert verdict.decision == "rejected" and verdict.lost == verdict.tasks_used == policy.design(1).losses_to_reject

    answered = frozenset(e.task_key for e in candidate.episodes)
    more, _, asked_next = run({}, "cand-next", stop_when=lambda eps: "enough" if len(eps) >= 3 else None,
                              answered=answered)
    assert asked_next and not set(asked_next) & answered and len(set(asked_next)) == len(asked_next)
    assert sorted(asked_next) == sorted(e.task_key for e in more.episodes)
