"""The imports between the project's packages follow the data flow (docs/architecture.md).

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


# ---- between modules: no circle anywhere, and autoresearch's subpackages in their order ----

# autoresearch's subpackages in the order of autoresearch/__init__.py: each imports only those before it
# (and itself); the package's own modules (the run, the CLI) stand over all of them.
LAYERS = ("ground", "night", "measures", "checks", "trial", "crown", "champion", "report")


def _module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _project_modules() -> dict[str, Path]:
    return {_module_of(path): path for name in sorted(_ours()) for path in _files(name)}


def _targets(node: ast.AST, modules: dict[str, Path]) -> list[str]:
    """The modules of ours an import statement loads: `from a.b import c` is a.b.c where c is a module, else a.b."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        names = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules else node.module
                 for alias in node.names]
    else:
        return []
    return [name for name in names if name in modules]


def module_graph(modules: dict[str, Path] | None = None) -> dict[str, dict[str, int]]:
    """module -> {module it imports: line}, for every module of ours: imports inside functions count too, and
    so do those only a type checker reads (`if TYPE_CHECKING:`): two modules that each need the other to be read
    are one concept in two files, or a third one's (serving.state between serving.app and serving.responses)."""
    modules = modules or _project_modules()
    graph: dict[str, dict[str, int]] = {}
    for module, path in modules.items():
        edges = graph.setdefault(module, {})
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            for target in _targets(node, modules):
                if target != module:
                    edges.setdefault(target, node.lineno)
    return graph


def import_circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Each strongly connected set of modules that import one another, round or through others (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, {}):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            members = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                members.append(member)
                if member == node:
                    break
            if len(members) > 1:
                circles.append(sorted(members))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles


def _layer(module: str) -> int | None:
    """The place of an autoresearch module in LAYERS; the package's own modules stand over every layer."""
    parts = module.split(".")
    if parts[0] != "autoresearch":
        return None
    return LAYERS.index(parts[1]) if len(parts) > 2 and parts[1] in LAYERS else len(LAYERS)


def upward_imports(graph: dict[str, dict[str, int]]) -> list[str]:
    wrong = []
    for module, edges in sorted(graph.items()):
        here = _layer(module)
        for target, line in sorted(edges.items()):
            there = _layer(target)
            if here is not None and there is not None and there > here:
                wrong.append(f"{module}:{line} imports {target}: {LAYERS[here]} stands below "
                             f"{LAYERS[there] if there < len(LAYERS) else 'the package top'}")
    return wrong


def test_no_module_imports_itself_round_a_circle():
    circles = import_circles(module_graph())
    assert not circles, "import circle(s):\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_autoresearchs_subpackages_import_only_those_before_them():
    wrong = upward_imports(module_graph())
    assert not wrong, f"{len(wrong)} upward import(s):\n" + "\n".join(wrong)


def test_every_subpackage_has_its_place_and_the_package_docstring_says_the_order():
    subpackages = {p.parent.name for p in (ROOT / "autoresearch").glob("*/__init__.py")}
    assert subpackages == set(LAYERS)
    import autoresearch

    said = [line.split()[0] for line in autoresearch.__doc__.splitlines() if line.startswith("    ")
            and line.split() and line.split()[0] in LAYERS]
    assert said == list(LAYERS)


def test_the_rules_see_a_circle_only_a_type_checker_reads(tmp_path):
    """Before: `if TYPE_CHECKING:` imports were left out, and search_space.errors <-> budget and serving.app <->
    responses were circles the rule did not see."""
    app, responses = tmp_path / "app.py", tmp_path / "responses.py"
    app.write_text("from serving.responses import chat_whole\n")
    responses.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from serving.app import ServerState\n")
    assert import_circles(module_graph({"serving.app": app, "serving.responses": responses})) == [
        ["serving.app", "serving.responses"]]


def test_the_rules_see_a_circle_and_an_upward_import_even_inside_a_function():
    graph = {"autoresearch.measures.objectives": {"autoresearch.ground.study": 3},
             "autoresearch.ground.study": {"autoresearch.measures.ranking": 9},
             "autoresearch.measures.ranking": {"autoresearch.measures.objectives": 4}}
    assert import_circles(graph) == [sorted(graph)]
    assert upward_imports(graph) == ["autoresearch.ground.study:9 imports autoresearch.measures.ranking: "
                                     "ground stands below measures"]
    source = "def f():\n    from autoresearch.ground import study\n"
    modules = {"autoresearch.ground": ROOT, "autoresearch.ground.study": ROOT}
    assert [t for n in ast.walk(ast.parse(source)) for t in _targets(n, modules)] == ["autoresearch.ground.study"]
