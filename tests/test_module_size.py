"""Small modules with one job each: no module of the project over 400 lines (tests and CLIs included), but
for one whose docstring says why ("About N lines ...: the reason")."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MOST_LINES = 400


def _modules() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split()
    return [ROOT / name for name in listed if (ROOT / name).is_file()]


def _said_why(text: str) -> bool:
    return bool(re.search(r"About \d+ lines", ast.get_docstring(ast.parse(text)) or ""))


def test_no_module_is_over_400_lines_without_saying_why():
    over = [f"{path.relative_to(ROOT)}: {n} lines" for path in _modules()
            if (n := len((text := path.read_text(encoding="utf-8")).splitlines())) > MOST_LINES
            and not _said_why(text)]
    assert not over, "split by concept, or say why in the module's docstring:\n" + "\n".join(over)


def test_the_reason_is_read_from_the_docstring_only():
    assert _said_why('"""A CLI.\n\nAbout 410 lines in one module: the parser beside what it runs."""\n')
    assert not _said_why('"""A CLI."""\n# About 410 lines\n')
