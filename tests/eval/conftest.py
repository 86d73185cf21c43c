"""Fixtures for the eval tests: extra tiny-model servers (fresh launches) beside the shared `tiny_server`."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from eval.probes import ProbeSetConfig

# Small probes: the tiny model runs on 2 CPU cores. Same kinds as the real set, short long-context.
TINY_PROBES = ProbeSetConfig(continuation_tokens=12, long_context_tokens=(300,), long_continuation_tokens=8)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def launch_tiny(tiny_model_dir, tmp_path_factory):
    """Start a fresh server on the tiny model with a given serving config (a context manager)."""
    from serving.config import ServingConfig
    from serving.launcher import LaunchSpec, free_port, launch

    @contextlib.contextmanager
    def start(config: dict, tag: str):
        log_path = tmp_path_factory.mktemp("eval-servers") / f"{tag}.log"
        spec = LaunchSpec(
            model_dir=tiny_model_dir,
            config=ServingConfig.from_dict(config),
            port=free_port(),
            log_path=log_path,
            startup_timeout_s=180,
        )
        with launch(spec) as server:
            yield server

    return start
