"""What the installed exllamav3 accepts, read from its source without importing it.

Importing exllamav3 builds or loads its CUDA extension, so on a CPU machine the only safe way to
learn its signatures is to parse the files. The serving engine checks every keyword it passes
against this surface (exllamav3 silently ignores unknown keywords), and search_space checks its
whole catalog against it at start-up.

Usage:
    surface = installed_surface()
    surface.require("Generator", ["max_chunk_size", "prefill_cooldown"])
    "EXL3_INT8_GEMV" in surface.env_vars
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import importlib.util
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from serving.errors import SurfaceMismatch

__all__ = ["Exl3Surface", "installed_surface", "read_surface"]

# callable name -> (file inside the package, class name, method name)
_CALLABLES = {
    "Generator": ("generator/generator.py", "Generator", "__init__"),
    "Job": ("generator/job.py", "Job", "__init__"),
    "Cache": ("cache/cache.py", "Cache", "__init__"),
    "CacheLayer_quant": ("cache/quant.py", "CacheLayer_quant", "__init__"),
    "Model.load": ("model/model.py", "Model", "load_gen"),
    "Model.warmup": ("model/model.py", "Model", "warmup"),
}
_ENV_PATTERN = re.compile(r"""["'](EXL3_[A-Z0-9_]+|EXLLAMA_[A-Z0-9_]+|EXLLAMAV3_[A-Z0-9_]+)["']""")
_SOURCE_SUFFIXES = (".py", ".cpp", ".cu", ".cuh", ".h")


@dataclass(frozen=True)
class Exl3Surface:
    """Keyword parameters of the callables we drive, and every EXL3_* name the source reads."""

    version: str
    root: Path
    params: dict[str, frozenset[str]]
    env_vars: frozenset[str]

    def require(self, callable_name: str, names: Iterable[str]) -> None:
        """Raise SurfaceMismatch naming the first keyword the installed callable does not take."""
        known = self.params.get(callable_name)
        if known is None:
            raise SurfaceMismatch(f"exllamav3 {self.version} has no {callable_name} in {self.root}")
        for name in names:
            if name not in known:
                raise SurfaceMismatch(
                    f"exllamav3 {self.version} {callable_name}() has no argument {name!r}; "
                    f"it takes: {', '.join(sorted(known))}"
                )

    def require_env(self, names: Iterable[str]) -> None:
        for name in names:
            if name not in self.env_vars:
                raise SurfaceMismatch(
                    f"exllamav3 {self.version} never reads the environment variable {name!r} "
                    f"(not found in its source under {self.root})"
                )


@functools.cache
def installed_surface() -> Exl3Surface:
    """The surface of the exllamav3 that `import exllamav3` would load, found without importing it."""
    spec = importlib.util.find_spec("exllamav3")
    if spec is None or not spec.submodule_search_locations:
        raise SurfaceMismatch("exllamav3 is not installed; install it with: pip install exllamav3==1.6.5")
    root = Path(next(iter(spec.submodule_search_locations)))
    try:
        version = importlib.metadata.version("exllamav3")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return read_surface(root, version=version)


def read_surface(root: Path, *, version: str = "unknown") -> Exl3Surface:
    """Parse a source tree of exllamav3 (the installed package, or a copy for tests)."""
    params = {}
    for name, (relpath, cls, method) in _CALLABLES.items():
        path = root / relpath
        if path.exists():
            found = _keyword_params(path, cls, method)
            if found is not None:
                params[name] = found
    env_vars: set[str] = set()
    for path in root.rglob("*"):
        if path.suffix in _SOURCE_SUFFIXES and path.is_file():
            env_vars.update(_ENV_PATTERN.findall(path.read_text(errors="replace")))
    return Exl3Surface(version=version, root=root, params=params, env_vars=frozenset(env_vars))


def _keyword_params(path: Path, class_name: str, method_name: str) -> frozenset[str] | None:
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == method_name:
                    args = item.args
                    names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
                    return frozenset(n for n in names if n != "self")
    return None
