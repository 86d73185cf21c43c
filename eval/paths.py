"""Where eval keeps what it fetches and what it runs: one root, so a test can point it anywhere.

Usage:
    paths = EvalPaths.default()          # $EVAL_CACHE_DIR, else .cache/eval under the current directory
    paths.cache_dir / "runs"             # each suite run's directory (eval.runner.new_run_dir)
    paths.hub_dir                        # the workers' private Hugging Face cache (pinned data: eval.prime)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["EvalPaths"]


@dataclass(frozen=True, slots=True)
class EvalPaths:
    """Where eval keeps sources, data and run outputs (one root). One root, so a test can point it anywhere."""

    cache_dir: Path

    @classmethod
    def default(cls) -> EvalPaths:
        """$EVAL_CACHE_DIR, else .cache/eval under the current directory (the repository root)."""
        return cls(Path(os.environ.get("EVAL_CACHE_DIR") or Path.cwd() / ".cache" / "eval").resolve())

    @property
    def hf_home(self) -> Path:
        return self.cache_dir / "huggingface"

    @property
    def hub_dir(self) -> Path:
        return self.hf_home / "hub"
