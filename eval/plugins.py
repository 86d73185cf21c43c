"""Registers this package's verifiers plugins under the top-level ids verifiers can resolve.

verifiers 0.4.0 resolves a plugin id by importing a *top-level* module named after it
(`eval-mmath` -> `import eval_mmath`; it first probes `verifiers.v1.tasksets.<id>`, which makes a
dotted id such as `eval.tasksets.mmath` fail). Our plugins live inside the `eval` package, so every
process that resolves them (the taskset worker, the dry-run validator) calls `register_plugins()`
first, which aliases each id's module in `sys.modules`. Nothing happens at import time.
"""

from __future__ import annotations

import importlib
import sys

__all__ = ["PLUGIN_MODULES", "register_plugins"]

# plugin id -> (top-level alias verifiers imports, the real module)
PLUGIN_MODULES = {
    "eval-mmath": ("eval_mmath", "eval.tasksets.mmath"),
    "eval-logic": ("eval_logic", "eval.tasksets.logic"),
    "eval-chat": ("eval_chat", "eval.harness"),
}


def register_plugins() -> None:
    """Make `import eval_mmath` (and the others) return this package's modules. Idempotent."""
    for alias, target in PLUGIN_MODULES.values():
        if alias not in sys.modules:
            sys.modules[alias] = importlib.import_module(target)
