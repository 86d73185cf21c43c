"""What the installed exllamav3 accepts, read from its source without importing it.

Importing exllamav3 builds or loads its CUDA extension, so on a CPU machine the only safe way to
learn its signatures is to parse the files. The serving engine checks every keyword it passes
against this surface (exllamav3 silently ignores unknown keywords), and search_space checks its
whole catalog against it at start-up.

Usage:
    surface = installed_surface()
    surface.require("Generator", ["max_chunk_size", "prefill_cooldown"])
    "EXL3_INT8_GEMV" in surface.env_vars
    surface.architecture("Qwen3_5ForConditionalGeneration").has_mtp_component     # True
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import importlib.util
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from serving.errors import SurfaceMismatch

__all__ = ["ArchitectureInfo", "Exl3Surface", "installed_surface", "read_surface"]

# callable name -> (file inside the package, class name, method name)
_CALLABLES = {
    "Generator": ("generator/generator.py", "Generator", "__init__"),
    "Job": ("generator/job.py", "Job", "__init__"),
    "Cache": ("cache/cache.py", "Cache", "__init__"),
    "CacheLayer_quant": ("cache/quant.py", "CacheLayer_quant", "__init__"),
    "Model.load": ("model/model.py", "Model", "load_gen"),
    "Model.warmup": ("model/model.py", "Model", "warmup"),
    "Model.from_config": ("model/model.py", "Model", "from_config"),
}
_ENV_PATTERN = re.compile(r"""["'](EXL3_[A-Z0-9_]+|EXLLAMA_[A-Z0-9_]+|EXLLAMAV3_[A-Z0-9_]+)["']""")
_SOURCE_SUFFIXES = (".py", ".cpp", ".cu", ".cuh", ".h")


@dataclass(frozen=True)
class ArchitectureInfo:
    """What exllamav3 does with a config.json `architectures` entry, read from architecture/*.py.

    `Config.from_directory` looks the name up in ARCHITECTURES (keyed by each config class's
    `arch_string`) and builds the model class whose `config_class` it is; that class's
    `self.caps.update({...})` says whether it is a drafter (`dflash_draft`, `mtp_draft`,
    `attach_target`), and the config class registers an `mtp` component only where it names an MTP
    model class (Qwen3_5ForConditionalGeneration does, text-only Qwen3_5ForCausalLM does not).
    """

    name: str
    model_class: str
    caps: frozenset[str]  # capability flags the model class (or a base) sets to True
    has_mtp_component: bool

    @property
    def is_dflash_drafter(self) -> bool:
        return "dflash_draft" in self.caps

    @property
    def is_attached_drafter(self) -> bool:
        """A drafter that borrows the target's layers (DFlash, MTP heads, Gemma4-style assistants)."""
        return "attach_target" in self.caps or "mtp_draft" in self.caps or self.is_dflash_drafter


@dataclass(frozen=True)
class Exl3Surface:
    """Keyword parameters of the callables we drive, every EXL3_* name the source reads, its architectures."""

    version: str
    root: Path
    params: dict[str, frozenset[str]]
    env_vars: frozenset[str]
    architectures: dict[str, ArchitectureInfo] = field(default_factory=dict)

    def architecture(self, name: str) -> ArchitectureInfo:
        """The installed exllamav3's handling of config.json architecture `name`.

        Raises:
            SurfaceMismatch: exllamav3 does not know the architecture.
        """
        info = self.architectures.get(name)
        if info is None:
            raise SurfaceMismatch(f"exllamav3 {self.version} does not know the architecture {name!r} "
                                  f"(no config class with that arch_string under {self.root / 'architecture'})")
        return info

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
    return Exl3Surface(version=version, root=root, params=params, env_vars=frozenset(env_vars),
                       architectures=_architectures(root / "architecture"))


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


@dataclass
class _ClassFacts:
    bases: list[str]
    arch_string: str | None = None
    config_class: str | None = None
    caps: set[str] = field(default_factory=set)
    names: set[str] = field(default_factory=set)  # every bare name the class body mentions


def _architectures(folder: Path) -> dict[str, ArchitectureInfo]:
    """arch_string -> ArchitectureInfo over every architecture/*.py of an exllamav3 source tree."""
    classes: dict[str, _ClassFacts] = {}
    for path in sorted(folder.glob("*.py")) if folder.is_dir() else ():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                classes[node.name] = _class_facts(node)

    def lineage(name: str) -> list[_ClassFacts]:
        out, todo, seen = [], [name], set()
        while todo:
            current = todo.pop(0)
            if current in classes and current not in seen:
                seen.add(current)
                out.append(classes[current])
                todo.extend(classes[current].bases)
        return out

    def caps_of(name: str) -> set[str]:
        return set().union(*(facts.caps for facts in lineage(name)))

    def arch_of(name: str) -> str | None:
        return next((f.arch_string for f in lineage(name) if f.arch_string), None)

    mtp_classes = {name for name in classes if "mtp_draft" in caps_of(name)}
    out: dict[str, ArchitectureInfo] = {}
    for name, facts in classes.items():
        config = facts.config_class
        arch = arch_of(config) if config else None
        if arch is None or arch in out:
            continue
        # own arch_string only: a subclass config (DFlash2Config) names its own architecture
        if classes.get(config) is None or classes[config].arch_string is None:
            continue
        mentions = set().union(*(f.names for f in lineage(config)))
        out[arch] = ArchitectureInfo(name=arch, model_class=name, caps=frozenset(caps_of(name)),
                                     has_mtp_component=bool(mentions & mtp_classes))
    return out


def _class_facts(node: ast.ClassDef) -> _ClassFacts:
    facts = _ClassFacts(bases=[b.id for b in node.bases if isinstance(b, ast.Name)])
    for item in node.body:
        if isinstance(item, ast.Assign) and len(item.targets) == 1 and isinstance(item.targets[0], ast.Name):
            target, value = item.targets[0].id, item.value
            if target == "arch_string" and isinstance(value, ast.Constant) and isinstance(value.value, str):
                facts.arch_string = value.value
            elif target == "config_class" and isinstance(value, ast.Name):
                facts.config_class = value.id
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            facts.names.add(sub.id)
        elif (isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr == "update"
              and isinstance(sub.func.value, ast.Attribute) and sub.func.value.attr == "caps"
              and sub.args and isinstance(sub.args[0], ast.Dict)):
            for key, value in zip(sub.args[0].keys, sub.args[0].values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(value, ast.Constant) and value.value is True:
                    facts.caps.add(key.value)
    return facts
