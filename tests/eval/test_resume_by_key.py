"""The lazy answers resume by task key: after a run stopped with answers in flight (holes before answers that
finished), the next run of the same answers asks each hole and nothing answered already.

A run stopped after a clean drain leaves a prefix of the run order answered, where resuming by count (skip the
first N tasks) and by key agree; only holes tell them apart. Real parts: verifiers' offline rg-math taskset, the
worker's selection (eval.worker.answer, in this process), the launch eval.runner builds. The model server is
the test double at the outside boundary (a scripted chat server whose slow replies finish last).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json

from eval.paths import EvalPaths
from eval.plugins import register_plugins
from eval.prime.locks import load_locks
from eval.run_config import build_launch
from eval.suites import SuiteOverrides, apply_overrides, get_suite
from eval.worker import answer
from openai_client import Endpoint
from tests.eval.test_scoring_through_verifiers import ScriptedChatServer
from tests.eval.test_tasksets import load_offline_tasks

TASKS = 16
SLOW = (1, 4)  # in flight when the first run stops: holes before tasks that finished


def _suite():
    suite = apply_overrides(get_suite("offline"), SuiteOverrides(limit=TASKS, max_tokens=64, tasksets=("rg-math",)))
    spec = dataclasses.replace(suite.tasksets[0], knobs=(("generators", ["chain_sum"]), ("size_per_generator", TASKS)))
    return dataclasses.replace(suite, tasksets=(spec,)), spec


def _answered(traces) -> list[str]:
    return [json.loads(line)["task"]["key"] for line in traces.read_text().splitlines()] if traces.exists() else []


def _run(tmp_path, monkeypatch, name: str, server: ScriptedChatServer, answered: frozenset[str], *, stop_at=None):
    """One run of the worker's selection as eval.runner launches it; `stop_at`: stop it (cancelled, as a killed
    worker) once that many answers are written."""
    from verifiers.v1.configs.cli.eval import EvalConfig

    suite, spec = _suite()
    launch = build_launch(suite, spec, Endpoint(url=server.url, model="scripted"), locks=load_locks(),
                          paths=EvalPaths(tmp_path / "cache"), run_dir=tmp_path / name, answered=answered)
    for key, value in launch.env.items():
        monkeypatch.setenv(key, value)
    launch.cwd.mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(launch.cwd)
    config = EvalConfig.model_validate(launch.config)

    async def run() -> None:
        worker = asyncio.create_task(answer(config, launch.answered, lambda: False))
        if stop_at is None:
            await worker
            return
        while not worker.done() and len(_answered(launch.traces_path)) < stop_at:
            await asyncio.sleep(0.01)
        worker.cancel()  # the answers in flight are lost, as under a kill
        with contextlib.suppress(asyncio.CancelledError):
            await worker

    asyncio.run(run())
    return _answered(launch.traces_path)


def test_a_run_stopped_with_answers_in_flight_is_resumed_by_key(tmp_path, monkeypatch):
    register_plugins()
    tasks = load_offline_tasks({"id": "eval-logic", "generators": ["chain_sum"], "size_per_generator": TASKS},
                               limit=TASKS)
    key_of = {t.data.prompt: t.key for t in tasks}
    order = [t.key for t in tasks]
    first = ScriptedChatServer({}, delay_s=0.01, delays_s={tasks[p].data.prompt: 30.0 for p in SLOW})
    try:
        answered = _run(tmp_path, monkeypatch, "first", first, frozenset(), stop_at=10)
    finally:
        first.close()
    asked = [key_of[b["messages"][-1]["content"]] for b in first.bodies]
    holes = set(asked) - set(answered)
    assert {order[p] for p in SLOW} <= holes and len(set(answered)) == len(answered) >= 10
    assert min(order.index(k) for k in holes) < max(order.index(k) for k in answered)  # not a prefix

    second = ScriptedChatServer({})
    try:
        more = _run(tmp_path, monkeypatch, "second", second, frozenset(answered))
    finally:
        second.close()
    asked_next = [key_of[b["messages"][-1]["content"]] for b in second.bodies]
    assert not set(asked_next) & set(answered)  # by count, the first len(answered) tasks were skipped instead
    assert sorted(asked_next) == sorted(more) and len(set(more)) == len(more)  # each asked once, answered
    assert sorted(answered + more, key=order.index) == order  # together: every task, once
