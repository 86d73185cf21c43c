"""Stand-in for prime-envs' `mmlu-pro` (written here, not upstream code): like the pinned taskset it loads
`TIGER-Lab/MMLU-Pro` by its Hub name from the working directory (the `cwd` binding makes that a link to
the verified snapshot), puts the lettered options in the prompt and scores the boxed letter.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import verifiers.v1 as vf

__all__ = ["MMLUProTaskset"]

DATASET_NAME = "TIGER-Lab/MMLU-Pro"
LETTERS = "ABCDEFGHIJ"
SUFFIX = "Please reason step by step, then ONLY give the letter of the correct answer within \\boxed{}."


class MMLUProConfig(vf.TasksetConfig):
    n_shot: int = 0


class MMLUProData(vf.TaskData):
    answer: str


class MMLUProTask(vf.Task[MMLUProData]):
    @vf.reward
    async def correct(self, trace: vf.Trace) -> float:
        reply = (trace.last_reply or "").rsplit("</think>", 1)[-1]
        return float(vf.extract_boxed_answer(reply, strict=True).strip().upper() == self.data.answer)


class MMLUProTaskset(vf.Taskset[MMLUProTask, MMLUProConfig]):
    def load(self):
        table = pq.read_table(Path(DATASET_NAME) / "data" / "test-00000-of-00001.parquet")
        for row in table.to_pylist():
            options = "\n".join(f"{LETTERS[i]}. {option}" for i, option in enumerate(row["options"]))
            yield MMLUProTask(MMLUProData(id=str(row["question_id"]),
                                          prompt=f"{row['question']}\n\n{options}\n\n{SUFFIX}",
                                          answer=row["answer"]), self.config.task)
