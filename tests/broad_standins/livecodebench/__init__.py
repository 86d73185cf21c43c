"""Stand-in for prime-envs' `livecodebench` (written here, not upstream code): like the pinned taskset it
loads `livecodebench/code_generation_lite` by its Hub name from the private Hub cache (`refs/main` names
the pinned revision), filters by `start_date` / `end_date`, and runs each task's tests in the rollout's
runtime, where the candidate's program runs (a container on a connected machine).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shlex
from pathlib import Path

import verifiers.v1 as vf
from huggingface_hub import snapshot_download

__all__ = ["LiveCodeBenchTaskset"]

REPO = "livecodebench/code_generation_lite"
SYSTEM = "You are an expert Python programmer. Answer with one ```python``` block that reads stdin and prints."


class LiveCodeBenchConfig(vf.TasksetConfig):
    version: str = "v6"
    start_date: str = "8/1/2024"
    end_date: str = "5/1/2025"


class LiveCodeBenchData(vf.TaskData):
    tests: str  # JSON: [{"input": ..., "output": ...}]


def _program(reply: str) -> str | None:
    blocks = re.findall(r"```(?:python)?\n(.*?)```", reply.rsplit("</think>", 1)[-1], flags=re.S)
    return blocks[-1] if blocks else None


class LiveCodeBenchTask(vf.Task[LiveCodeBenchData]):
    @vf.reward
    async def passed(self, trace: vf.Trace, runtime) -> float:
        program = _program(trace.last_reply or "")
        if program is None:
            return 0.0
        for case in json.loads(self.data.tests):
            command = f"printf %s {shlex.quote(case['input'])} | python3 -c {shlex.quote(program)}"
            result = await runtime.run(["sh", "-c", command], {})
            if result.exit_code != 0 or result.stdout.strip() != case["output"].strip():
                return 0.0
        return 1.0


def _date(text: str) -> dt.date:
    month, day, year = (int(part) for part in text.split("/"))
    return dt.date(year, month, day)


class LiveCodeBenchTaskset(vf.Taskset[LiveCodeBenchTask, LiveCodeBenchConfig]):
    def load(self):
        root = Path(snapshot_download(REPO, repo_type="dataset", local_files_only=True))
        start, end = _date(self.config.start_date), _date(self.config.end_date)
        for path in sorted(root.glob("test*.jsonl")):
            for line in path.read_text(encoding="utf-8").splitlines():
                row = json.loads(line)
                if start <= dt.date.fromisoformat(row["contest_date"][:10]) <= end:
                    yield LiveCodeBenchTask(LiveCodeBenchData(id=row["question_id"], system_prompt=SYSTEM,
                                                              prompt=row["question_content"], tests=row["tests"]),
                                            self.config.task)
