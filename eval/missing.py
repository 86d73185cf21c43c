"""One piece a suite needs that is not here, and whether a plugin is: what eval.preflight and eval.prime's
preflight both say, kept apart so that neither imports the other."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Literal

from eval.plugins import PLUGIN_MODULES

__all__ = ["Missing", "is_installed"]


def is_installed(plugin_id: str, kind: str = "tasksets") -> bool:
    """Whether verifiers could import the plugin `plugin_id` (a taskset or harness) in this interpreter."""
    if plugin_id in PLUGIN_MODULES:
        return True  # ships inside this package (eval.plugins)
    module = plugin_id.rsplit("/", 1)[-1].split("@", 1)[0].replace("-", "_").lower()
    if importlib.util.find_spec(f"verifiers.v1.{kind}.{module}") is not None:
        return True
    return importlib.util.find_spec(module) is not None


@dataclass(frozen=True, kw_only=True, slots=True)
class Missing:
    """One piece a suite needs that is not here: what, and the command that fixes it (one line)."""

    kind: Literal["environment", "dataset", "runtime"]
    name: str
    line: str
