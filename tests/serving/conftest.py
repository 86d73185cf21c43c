"""Fixtures of the serving tests: a second server with an API key and a small context."""

from __future__ import annotations

import pytest

from serving.config import ServingConfig
from serving.launcher import LaunchSpec, free_port, launch


@pytest.fixture(scope="session")
def keyed_server(tiny_model_dir, tmp_path_factory):
    """A second server: API key required, 512-token context."""
    tmp = tmp_path_factory.mktemp("keyed")
    key = tmp / "key"
    key.write_text("test-key-123\n")
    key.chmod(0o600)
    config = ServingConfig.from_dict({"engine": "transformers", "args": {"context_tokens": 512, "threads": 1},
                                      "served_model_name": "tiny-keyed"})
    spec = LaunchSpec(model_dir=tiny_model_dir, config=config, port=free_port(), log_path=tmp / "server.log",
                      api_key_file=key, startup_timeout_s=180)
    with launch(spec) as server:
        yield server
