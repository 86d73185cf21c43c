"""One taskset, one process: `python -m eval.worker CONFIG.json [--answered KEYS.json] [--stop FILE] [--report FILE]`.

The parent (eval.runner) sets the offline environment and working directory; this process registers
the project's plugins, validates the EvalConfig with verifiers' own schema and runs its selection the
way verifiers' run_eval does (the env's serving resources, `env.run_slot` per rollout, each finished
episode appended to traces.jsonl), with two differences the lazy answers need:
- `--answered`: the task keys already answered in earlier runs are left out, the rest run in the
  selection's order, so the tasks an interrupted run left unanswered (holes) come first;
- `--stop`: once that file exists, no further task is sent and those in flight are answered (eval.dispatch).
`--report` receives {"tasks": ..., "dispatched": ...}: whether the run reached the selection's end.
Exit status: 0 when the run finished (episodes may still be ok=false: that is data, not a crash),
1 when verifiers raised.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from eval.dispatch import Dispatched, answer_in_order

if TYPE_CHECKING:
    from verifiers.v1.configs.cli.eval import EvalConfig


async def answer(config: EvalConfig, answered: Collection[str], stop_requested: Callable[[], bool]) -> Dispatched:
    """The selection's tasks not in `answered`, in order, until `stop_requested()`; what ran, drained."""
    from verifiers.v1.cli.output import output_path, save_config
    from verifiers.v1.clients import ModelContext
    from verifiers.v1.episode import EvalRunInfo
    from verifiers.v1.utils.loaders import load_environment
    from verifiers.v1.utils.platform import PushState, abort_run, finish_run, open_run
    from verifiers.v1.utils.trace_store import append_episode

    env = load_environment(config.env)
    selection = env.taskset.select(config.select)
    if not selection.bounded:
        raise ValueError(f"{type(selection).__name__} is infinite: bound the run with select.limit")
    left = set(answered)
    tasks = [task for task in selection if task.key not in left]
    out = output_path(config)
    save_config(config, out)  # the resolved config, and an empty traces.jsonl even when nothing is left
    push = PushState()
    run = open_run(config, push, num_examples=len(tasks))
    os.environ.setdefault("VF_RUN_ID", config.run.id)
    ctx = ModelContext(client=config.client, model=config.model, sampling=config.sampling)
    write_lock = asyncio.Lock()
    episodes = []

    async def on_complete(episode) -> None:
        episode.record_run(EvalRunInfo(id=config.run.id, name=config.run.name))
        await append_episode(out, episode, write_lock)
        episodes.append(episode)

    try:
        async with env.serving():
            slots = [slot for task in tasks for slot in env.slots(task, config.num_rollouts)]
            dispatched = await answer_in_order(slots, lambda slot: env.run_slot(slot, ctx, None, on_complete),
                                               max_concurrent=config.max_concurrent, stop_requested=stop_requested)
        await asyncio.to_thread(finish_run, run, episodes, push)
    except BaseException as exc:
        await asyncio.to_thread(abort_run, run, exc, push)
        raise
    return dispatched


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.worker", description=__doc__.splitlines()[0])
    parser.add_argument("config", type=Path, help="the EvalConfig as JSON")
    parser.add_argument("--answered", type=Path, help="a JSON list of task keys answered already")
    parser.add_argument("--stop", type=Path, help="send no further task once this file exists")
    parser.add_argument("--report", type=Path, help="write what was sent here as JSON")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    from verifiers.v1.configs.cli.eval import EvalConfig

    from eval.plugins import register_plugins

    register_plugins()
    config = EvalConfig.model_validate(json.loads(args.config.read_text()))
    answered = json.loads(args.answered.read_text()) if args.answered else []
    stop = args.stop
    dispatched = asyncio.run(answer(config, answered, stop.exists if stop else lambda: False))
    if args.report:
        args.report.write_text(json.dumps({"tasks": dispatched.tasks, "dispatched": dispatched.dispatched}))
    print(f"tasks: {dispatched.tasks}, sent: {dispatched.dispatched}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
