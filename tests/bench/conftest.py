"""Fixtures for bench's tests: a second, different OpenAI-compatible server (`transformers serve`)."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from serving.launcher import free_port


@dataclass(frozen=True)
class PeerServer:
    url: str
    log_path: Path


@pytest.fixture(scope="session")
def transformers_serve(tiny_model_dir: Path, tmp_path_factory) -> Iterator[PeerServer]:
    """`transformers serve` on the tiny model: a real peer process, started and stopped here."""
    missing = [
        m for m in ("accelerate", "fastapi", "uvicorn", "openai") if importlib.util.find_spec(m) is None
    ]
    if missing:
        pytest.skip(f"transformers[serving] is not installed (missing {', '.join(missing)})")
    port = free_port()
    log_path = tmp_path_factory.mktemp("peer") / "transformers-serve.log"
    cmd = [
        sys.executable,
        "-m",
        "transformers.cli.transformers",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--device",
        "cpu",
        str(tiny_model_dir),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    with log_path.open("wb") as log:
        process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, process, log_path, timeout_s=240)
        yield PeerServer(url=url, log_path=log_path)
    finally:
        _stop(process)


def _wait_ready(url: str, process: subprocess.Popen, log_path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"transformers serve exited with {process.returncode}:\n{log_path.read_text()[-3000:]}"
            )
        try:
            if httpx.get(f"{url}/v1/models", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"transformers serve not ready after {timeout_s} s:\n{log_path.read_text()[-3000:]}")


def _stop(process: subprocess.Popen) -> None:
    for sig, wait_s in ((signal.SIGTERM, 15), (signal.SIGKILL, 15)):
        if process.poll() is not None:
            return
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
