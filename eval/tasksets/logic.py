"""reasoning-gym logic puzzles at fixed seeds as a verifiers taskset, scored by reasoning-gym.

Tasks are generated offline by `reasoning_gym.create_dataset(generator, size, seed)` (the installed
version is checked against locks/offline-data.toml) and interleaved round-robin across generators,
so the first N tasks cover every kind. Prompt: reasoning-gym's default system prompt (answer in
<answer></answer>); score: its `extract_answer` then the generator's own `score_answer`.

Usage (as a plugin): --env.taskset.id eval-logic --env.taskset.seed 0
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import verifiers.v1 as vf
from pydantic import Field

from eval.tasksets.package_data import verified_package_dir

__all__ = ["LogicTaskset", "task_rows"]

DEFAULT_GENERATORS = ("knights_knaves", "syllogism", "zebra_puzzles")


@cache
def _dataset(generator: str, size: int, seed: int):
    import reasoning_gym

    verified_package_dir("reasoning-gym", Path(reasoning_gym.__file__).parent)
    return reasoning_gym.create_dataset(generator, size=size, seed=seed)


class LogicConfig(vf.TasksetConfig):
    generators: list[str] = Field(default_factory=lambda: list(DEFAULT_GENERATORS))
    seed: int = 0
    size_per_generator: int = Field(10, ge=1)


class LogicData(vf.TaskData):
    answer: str
    generator: str
    seed: int
    size: int
    entry_index: int


class LogicTask(vf.Task[LogicData]):
    @property
    def key(self) -> str:
        d = self.data
        return f"reasoning-gym:{d.generator}:seed{d.seed}:size{d.size}:{d.entry_index}"

    @vf.reward
    async def correct(self, trace: vf.Trace) -> float:
        from reasoning_gym.utils import extract_answer

        dataset = _dataset(self.data.generator, self.data.size, self.data.seed)
        entry = dataset[self.data.entry_index]
        return float(dataset.score_answer(extract_answer(trace.last_reply), entry))


def task_rows(generators: list[str] | tuple[str, ...], size: int, seed: int):
    """The tasks in run order (round-robin across generators) as plain rows: also a bench workload's source."""
    from reasoning_gym.utils import SYSTEM_PROMPTS

    datasets = [(g, _dataset(g, size, seed)) for g in generators]
    for i in range(size):
        for generator, dataset in datasets:
            entry = dataset[i]
            yield {"id": f"{generator}-{seed}-{i}", "prompt": entry["question"],
                   "system_prompt": SYSTEM_PROMPTS["default"], "answer": str(entry["answer"]),
                   "generator": generator, "entry_index": i}


class LogicTaskset(vf.Taskset[LogicTask, LogicConfig]):
    def load(self):
        size, seed = self.config.size_per_generator, self.config.seed
        for row in task_rows(self.config.generators, size, seed):  # a row is the task's data but seed and size
            yield LogicTask(LogicData(**row, seed=seed, size=size), self.config.task)
