"""The imports between the project's packages follow the data flow (README, "Architecture").

The rule, read from the source with `ast` (imports inside functions count too):

    tuner_errors                      the one error root; imports nothing of ours
    gpu, results, openai_client       the ground every package may stand on
    serving                           the server under test: never imports its measurers
    search_space                      the server's knobs, over serving's config
    bench, eval                       the measurers: peers, neither imports the other nor serving
    autoresearch, benchmarks          the loop and the one-off benchmarks, over all of them

A package may import only the packages `ALLOWED` lists for it. A new top-level package or module
must be given its place here before it can import anything of ours.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_GROUND = {"tuner_errors", "gpu", "results", "openai_client"}
ALLOWED: dict[str, set[str]] = {
    "tuner_errors": set(),
    "gpu": {"tuner_errors"},
    "results": {"tuner_errors"},
    "openai_client": {"tuner_errors"},
    "serving": {"tuner_errors", "gpu", "openai_client"},
    "search_space": {"tuner_errors", "gpu", "serving"},
    "bench": {"tuner_errors", "gpu", "results", "openai_client"},
    "eval": {"tuner_errors", "results", "openai_client"},
    "autoresearch": _GROUND | {"serving", "search_space", "bench", "eval"},
    "benchmarks": _GROUND | {"serving", "bench"},
}


def _ours() -> set[str]:
    """The project's top-level packages and modules (what an import of ours can name)."""
    names = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file() and p.name != "tests"}
    return names | {p.stem for p in ROOT.glob("*.py")}


def _files(name: str) -> list[Path]:
    path = ROOT / name
    return sorted(path.rglob("*.py")) if path.is_dir() else [ROOT / f"{name}.py"]


def _imported(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, top-level name) of every absolute import in a module."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
    return found


def wrong_way_imports() -> list[str]:
    ours = _ours()
    wrong = []
    for package in sorted(ours):
        allowed = ALLOWED.get(package, set())
        for path in _files(package):
            for line, name in _imported(ast.parse(path.read_text(encoding="utf-8"))):
                if name in ours and name != package and name not in allowed:
                    wrong.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    return wrong


def test_every_package_has_a_place_in_the_rule():
    assert _ours() <= set(ALLOWED), f"give these a place in ALLOWED: {sorted(_ours() - set(ALLOWED))}"


def test_imports_between_packages_follow_the_data_flow():
    wrong = wrong_way_imports()
    assert not wrong, f"{len(wrong)} wrong-way import(s):\n" + "\n".join(wrong)


def test_the_rule_sees_a_wrong_way_import():
    """The reader itself: an import inside a function, `import a.b` and `from a.b import c` all count."""
    source = "import bench.client\nfrom eval import x\ndef f():\n    from autoresearch.ground.plan import RunPlan\n"
    assert [name for _, name in _imported(ast.parse(source))] == ["bench", "eval", "autoresearch"]
