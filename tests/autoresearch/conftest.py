"""An embedded-default study run once, as a user runs it: `python -m autoresearch` in a fresh folder."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

# No --port: the loop's servers take free ports by default (the fixture below holds the README's old 18020)
FAST = ["--suite-limit", "1", "--suite-max-tokens", "16", "--finalist-launches", "2"]
OLD_DEFAULT_PORT = 18020


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


@contextlib.contextmanager
def holding_port(port: int):
    """Listen on `port` for the block, as another server would; if something already does, it holds it."""
    holder = socket.socket()
    try:
        holder.bind(("127.0.0.1", port))
        holder.listen()
    except OSError:
        pass  # taken already: by another program, which is the point
    try:
        yield
    finally:
        holder.close()


@pytest.fixture(scope="session")
def loop_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("autoresearch-cache")


@pytest.fixture(scope="session")
def embedded_study(tmp_path_factory, loop_cache) -> StudyRun:
    cwd = tmp_path_factory.mktemp("embedded-study")
    env = loop_env(loop_cache)
    with holding_port(OLD_DEFAULT_PORT):  # another program on the port the loop once took by default
        result = run_loop(cwd, env, "--trials", "3", *FAST)
    assert result.returncode == 0, result.stdout + result.stderr[-5000:]
    return StudyRun(cwd=cwd, env=env, result=result)


@pytest.fixture(scope="session")
def small_model(tmp_path_factory):
    """A headers-only exllamav3 checkpoint for the stage tests (tests.autoresearch.stage_env)."""
    from .stage_env import write_small_model

    return write_small_model(tmp_path_factory.mktemp("small-model") / "small")
