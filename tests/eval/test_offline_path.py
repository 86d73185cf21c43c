"""The offline path reads without the Prime/Docker supply chain: nothing outside eval/prime imports it at
import time, and the offline suite's preflight and worker configs never reach it.

eval.prime (the pinned Prime tasksets, their locks, sources, data snapshots, the Docker runtime image and
its preflight) is reached only from inside the branches a suite that needs it takes
(`SuiteSpec.needs_prime`), the runner's one seam that records the pins every run ran under, and the CLI's
setup, data and image commands. The imports are read with `ast`, in the style of tests/test_import_rule.py:
those a module runs when it is imported (its top level, `if TYPE_CHECKING:` blocks aside).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

EVAL = Path(__file__).resolve().parents[2] / "eval"
# The harness and the offline tasksets import verifiers (seconds): the first test reads their imports instead.
OFFLINE_PATH = ("eval", "eval.suites", "eval.runner", "eval.worker", "eval.decision", "eval.store", "eval.lockfiles")


def _is_type_checking(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def import_time_imports(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, module) of each absolute import a module runs when imported: its top level, `try`/`if` bodies
    included, functions, classes and `if TYPE_CHECKING:` blocks not."""
    found: list[tuple[int, str]] = []
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop(0)
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
        elif isinstance(node, (ast.If, ast.Try)) and not _is_type_checking(node):
            pending += [*node.body, *node.orelse, *getattr(node, "handlers", ()), *getattr(node, "finalbody", ())]
        elif isinstance(node, ast.ExceptHandler):
            pending += node.body
    return found


def _names_prime(module: str) -> bool:
    return module == "eval.prime" or module.startswith("eval.prime.")


def test_no_module_outside_eval_prime_imports_it_at_import_time():
    wrong = [
        f"{path.relative_to(EVAL.parent)}:{line} imports {module}"
        for path in sorted(EVAL.rglob("*.py"))
        if "prime" not in path.relative_to(EVAL).parts
        for line, module in import_time_imports(ast.parse(path.read_text(encoding="utf-8")))
        if _names_prime(module)
    ]
    assert not wrong, "the offline path imports the supply chain:\n" + "\n".join(wrong)


def test_the_reader_sees_top_level_imports_and_not_deferred_ones():
    source = ("from typing import TYPE_CHECKING\nimport eval.prime.locks\nif TYPE_CHECKING:\n    from eval.prime import Locks\n"
              "try:\n    from eval.prime import x\nexcept ImportError:\n    pass\ndef f():\n    from eval.prime import y\n")
    assert [m for _, m in import_time_imports(ast.parse(source))] == ["typing", "eval.prime.locks", "eval.prime"]


def test_importing_the_offline_path_and_checking_the_offline_suite_never_loads_eval_prime(repo_root, tmp_path):
    probe = f"""
import sys
{"; ".join(f"import {m}" for m in OFFLINE_PATH)}
from eval.paths import EvalPaths
from eval.preflight import preflight
from eval.run_config import build_launch
from eval.suites import get_suite
from openai_client import Endpoint

suite, paths = get_suite("offline"), EvalPaths(__import__("pathlib").Path(sys.argv[1]))
assert not suite.needs_prime and get_suite("broad").needs_prime
preflight(suite, paths=paths)
for spec in suite.tasksets:
    build_launch(suite, spec, Endpoint(url="http://127.0.0.1:9", model="m"), paths=paths, run_dir=paths.cache_dir / "run")
print(sorted(m for m in sys.modules if m == "eval.prime" or m.startswith("eval.prime.")))
"""
    result = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True,
                            cwd=repo_root, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
