"""TabbyAPI's config.yml schema, as its public source declares it, and the check of a written config against it.

TabbyAPI's pydantic models ignore keys they do not declare, without a word, so a key written wrong is
a setting silently not applied. tabbyapi_config_schema.json encodes the sections, keys and value
forms of TabbyAPI's `common/config_models.py` (its source line names the commit read); `export
--format tabbyapi` reads its config.yml back and checks it here before saying it wrote it.

Usage:
    problems = config_problems(yaml.safe_load(path.read_text()))   # [] when TabbyAPI reads every key
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

__all__ = ["SCHEMA", "config_problems"]

SCHEMA: dict = json.loads((Path(__file__).parent / "tabbyapi_config_schema.json").read_text())
_TYPES = {"str": lambda v: isinstance(v, str), "bool": lambda v: isinstance(v, bool),
          "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
          "float": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
          "list": lambda v: isinstance(v, list), "dict": lambda v: isinstance(v, dict)}


def _value_problem(where: str, value: Any, spec: dict) -> str | None:
    if "form" in spec:
        spec = SCHEMA["forms"][spec["form"]]
    kind = spec.get("type", "str")
    if not _TYPES[kind](value):
        return f"{where}: {value!r} is not a {kind}"
    if ("enum" in spec or "pattern" in spec) and not (
            value in spec.get("enum", ()) or re.fullmatch(spec.get("pattern", "(?!)"), str(value))):
        return f"{where}: {value!r} is not one of {spec.get('enum')} nor matches {spec.get('pattern')}"
    if kind in ("int", "float") and (value < spec.get("ge", value) or ("gt" in spec and not value > spec["gt"])):
        return f"{where}: {value!r} too small"
    if kind == "int" and value % spec.get("multiple_of", 1):
        return f"{where}: {value!r} not a multiple of {spec['multiple_of']}"
    return None


def config_problems(tree: Any) -> list[str]:
    """Every key of `tree` (a parsed config.yml) that TabbyAPI's schema does not declare, or whose value it would
    refuse, one line each; [] when TabbyAPI reads the whole file."""
    if not isinstance(tree, dict):
        return [f"config.yml is not a mapping of sections: {type(tree).__name__}"]
    problems = []
    for section, keys in tree.items():
        if section not in SCHEMA["sections"]:
            problems.append(f"unknown section {section!r}")
            continue
        for key, value in (keys or {}).items():
            spec = SCHEMA["sections"][section].get(key)
            problem = f"{section}.{key} is not in TabbyAPI's schema" if spec is None else \
                _value_problem(f"{section}.{key}", value, spec)
            if problem:
                problems.append(problem)
    return problems
