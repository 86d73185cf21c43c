"""Session fixtures shared by every package's tests: a generated tiny model and a real server on it."""

from __future__ import annotations

from pathlib import Path

import pytest

from serving.config import ServingConfig
from serving.launcher import LaunchSpec, free_port, launch
from serving.synthetic.tiny import write_tiny_model

TINY_CONFIG = ServingConfig.from_dict({"engine": "transformers", "args": {"threads": 1}})
# Prompt-lookup drafting from any 1-token match, so the tiny model's noise still gets drafts
NGRAM_CONFIG = ServingConfig.from_dict({"engine": "transformers",
                                        "args": {"threads": 1, "draft_mode": "ngram", "ngram_match_min": 1}})


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny random Qwen3_5 model with tokenizer and thinking chat template (seed 0)."""
    return write_tiny_model(tmp_path_factory.mktemp("models") / "tiny")


def _serve_tiny(model_dir: Path, tmp_path_factory, config: ServingConfig, name: str):
    log_path = tmp_path_factory.mktemp(name) / f"{name}.log"
    spec = LaunchSpec(model_dir=model_dir, config=config, port=free_port(), log_path=log_path, startup_timeout_s=180)
    with launch(spec) as server:
        yield server


@pytest.fixture(scope="session")
def tiny_server(tiny_model_dir, tmp_path_factory):
    """A real `python -m serving` process on the tiny model (transformers engine, no API key)."""
    yield from _serve_tiny(tiny_model_dir, tmp_path_factory, TINY_CONFIG, "tiny-server")


@pytest.fixture(scope="session")
def ngram_server(tiny_model_dir, tmp_path_factory):
    """A real `python -m serving` process on the tiny model that drafts by prompt lookup (n-gram)."""
    yield from _serve_tiny(tiny_model_dir, tmp_path_factory, NGRAM_CONFIG, "ngram-server")
