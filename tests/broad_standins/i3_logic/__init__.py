"""Stand-in for prime-envs' `i3-logic` (written here, not upstream code): the pinned taskset's nested
`dataset.name` / `dataset.subset` knobs, a parquet of logic puzzles under the snapshot's `logic/`, and an
in-process scorer. It imports `markdown` as upstream does, so a run proves the eval extra installs it.
"""

from __future__ import annotations

from pathlib import Path

import markdown  # noqa: F401  upstream i3-logic 0.2.1 declares markdown>=3.5.1
import pyarrow.parquet as pq
import verifiers.v1 as vf
from pydantic import BaseModel

__all__ = ["I3LogicTaskset"]


class DatasetConfig(BaseModel):
    name: str = "PrimeIntellect/INTELLECT-3-RL"
    subset: str = "default"


class I3LogicConfig(vf.TasksetConfig):
    dataset: DatasetConfig = DatasetConfig()


class I3LogicData(vf.TaskData):
    answer: str


class I3LogicTask(vf.Task[I3LogicData]):
    @vf.reward
    async def correct_answer(self, trace: vf.Trace) -> float:
        reply = (trace.last_reply or "").rsplit("</think>", 1)[-1].strip()
        lines = [line.strip() for line in reply.splitlines() if line.strip()]
        return float(bool(lines) and lines[-1].lower() == self.data.answer.strip().lower())


class I3LogicTaskset(vf.Taskset[I3LogicTask, I3LogicConfig]):
    def load(self):
        for i, row in enumerate(pq.read_table(Path(self.config.dataset.name) / "train-00000-of-00001.parquet")
                                .to_pylist()):
            yield I3LogicTask(I3LogicData(id=f"logic-{i}", prompt=row["question"], answer=row["answer"]),
                              self.config.task)
