"""The settings a champion changes from the baseline, and the champion with one of them put back.

A setting that applies only with another (the n-gram settings with `draft_mode`) goes back with it, and one
that cannot go back alone while its parent stays takes its default under that parent (the catalog's).
autoresearch.champion.minimize removes them one at a time; RESULTS.md lists them (change_costs).

Usage:
    changes = changes_of(champion, baseline)          # (Change("draft_mode", "ngram", "none", "args"), ...)
    config, put_back = without(champion, baseline, "draft_mode")
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from search_space.catalog import EXL3_KNOBS
from serving.config import ServingConfig
from serving.errors import ConfigError

__all__ = ["Change", "changes_of", "without"]

_UNSET = "(exllamav3 default)"  # an EXL3_* variable the config leaves to exllamav3


@dataclass(frozen=True)
class Change:
    """One setting in which the champion differs from the baseline (`where`: args or env)."""

    name: str
    value: Any
    baseline: Any
    where: str

    def __str__(self) -> str:
        return f"{self.name}={self.value}"


# Settings that apply only with another one: removing the parent puts them back too.
_CARRIED = {"draft_mode": ("ngram_match_min", "num_draft_tokens", "dynamic_draft_tokens", "draft_confidence",
                           "sparse_draft_head", "draft_model_dir"),
            "cache_kind": ("cache_k_bits", "cache_v_bits"),
            "dynamic_draft_tokens": ("draft_confidence",),
            "max_chunk_size": ("shared_chunk_size",)}

# A setting's default while its parent is on, where the baseline (parent off) has none: the catalog's.
_DEFAULT_UNDER_PARENT = {k.name: k.default for k in EXL3_KNOBS if k.name in ("ngram_match_min", "cache_k_bits",
                                                                               "cache_v_bits")}


def changes_of(config: ServingConfig, baseline: ServingConfig) -> tuple[Change, ...]:
    """Every setting in which `config` differs from `baseline`, in the report's order (args, then env)."""
    a, b = config.to_dict(), baseline.to_dict()
    out = [Change(k, v, b["args"].get(k), "args") for k, v in sorted(a["args"].items()) if b["args"].get(k) != v]
    env_names = sorted(set(a["env"]) | set(b["env"]))
    out += [Change(k, a["env"].get(k, _UNSET), b["env"].get(k, _UNSET), "env") for k in env_names
            if a["env"].get(k) != b["env"].get(k)]
    return tuple(out)


def without(config: ServingConfig, baseline: ServingConfig, name: str) -> tuple[ServingConfig, tuple[str, ...]]:
    """`config` with setting `name` back at the baseline's value, and the names put back with it.

    Raises:
        ConfigError: the setting cannot be put back alone (the config would break a serving rule).
    """
    data, base = config.to_dict(), baseline.to_dict()
    if name.startswith(("EXL3_", "EXLLAMA")) or name in data["env"]:
        env = dict(data["env"])
        env.pop(name, None)
        if name in base["env"]:
            env[name] = base["env"][name]
        return ServingConfig.from_dict({**data, "env": env}), (name,)
    try:
        return ServingConfig.from_dict({**data, "args": {**data["args"], name: base["args"][name]}}), (name,)
    except ConfigError:
        if name in _DEFAULT_UNDER_PARENT:  # e.g. ngram_match_min while n-gram drafting stays: its default there
            return ServingConfig.from_dict({**data, "args": {**data["args"], name: _DEFAULT_UNDER_PARENT[name]}}), (name,)
        carried = [c for c in _CARRIED.get(name, ()) if data["args"][c] != base["args"][c]]
        if not carried:
            raise
        put_back = {k: base["args"][k] for k in (name, *carried)}
        return ServingConfig.from_dict({**data, "args": {**data["args"], **put_back}}), (name, *carried)
