"""An embedded-default study run once, as a user runs it: `python -m autoresearch` in a fresh folder."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

FAST = ["--suite-limit", "1", "--suite-max-tokens", "16", "--finalist-launches", "1", "--port", "0"]


@dataclass
class StudyRun:
    cwd: Path
    env: dict
    result: subprocess.CompletedProcess

    @property
    def db_url(self) -> str:
        return f"sqlite:///{self.cwd / 'results.db'}"


def run_loop(cwd: Path, env: dict, *args: str, timeout: float = 1200) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autoresearch", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def loop_env(cache: Path) -> dict:
    root = Path(__file__).resolve().parents[2]
    return {**os.environ, "AUTORESEARCH_CACHE": str(cache), "PYTHONPATH": str(root)}


@pytest.fixture(scope="session")
def loop_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("autoresearch-cache")


@pytest.fixture(scope="session")
def embedded_study(tmp_path_factory, loop_cache) -> StudyRun:
    cwd = tmp_path_factory.mktemp("embedded-study")
    env = loop_env(loop_cache)
    result = run_loop(cwd, env, "--trials", "3", *FAST)
    assert result.returncode == 0, result.stdout + result.stderr[-5000:]
    return StudyRun(cwd=cwd, env=env, result=result)


@pytest.fixture(scope="session")
def small_model(tmp_path_factory):
    """A headers-only exllamav3 checkpoint for the stage tests (tests.autoresearch.stage_env)."""
    from .stage_env import write_small_model

    return write_small_model(tmp_path_factory.mktemp("small-model") / "small")
