"""A knob as data: its name, domain, exllamav3's default, how it is applied, and when it applies.

Conditions (`When`) read the model and the user's options (static: decided once per study) or
knobs sampled before them (dynamic: decided per trial). How a knob is applied says which
ServingConfig field or EXL3_* variable receives its value and which exllamav3 callables must accept
it, so the catalog can be checked against the installed library.

Usage:
    knob = Knob(name="max_chunk_size", domain=Categorical((2048, 4096)), default=2048,
                applied_as=ExlArg("max_chunk_size", targets=(("Generator", "max_chunk_size"),)),
                may_change_outputs=True)
    knob.is_active(context, values_so_far)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from search_space.domains import USE_DEFAULT, Domain
from search_space.model_info import ModelInfo
from serving.drafter import draft_kind
from serving.exl3_surface import Exl3Surface

__all__ = [
    "EnvVar",
    "ExlArg",
    "Knob",
    "SpaceContext",
    "TransformersArg",
    "When",
    "knob_is",
    "on_context",
]


@dataclass(frozen=True, kw_only=True)
class SpaceContext:
    """What a study is fixed to: the engine, the model, the user's draft model, the host's cores.

    `surface` is the installed exllamav3's (build_space fills it in for the exllamav3 engine): the
    drafting conditions read its architecture table, so "MTP applies" and "this draft checkpoint is a
    DFlash drafter" are exllamav3's answers, not the checkpoint's name.
    """

    engine: str
    model: ModelInfo
    draft_model: ModelInfo | None = None  # a draft checkpoint the user gave: DFlash drafter or small causal LM
    cpu_count: int = 1
    surface: Exl3Surface | None = field(default=None, compare=False, repr=False)

    @property
    def draft_kind(self) -> str | None:
        """The draft_mode the user's draft checkpoint serves ("dflash" or "draft_model"), None without one.

        Raises:
            serving.errors.ConfigError: exllamav3 does not know its architecture, or cannot drive it as a drafter.
        """
        if self.draft_model is None:
            return None
        return draft_kind(self.draft_model.architecture, self.surface)

    @property
    def has_mtp_component(self) -> bool:
        """The checkpoint has MTP weights and exllamav3 builds an MTP draft model for its architecture."""
        if not self.model.has_mtp_weights or self.surface is None:
            return False
        info = self.surface.architectures.get(self.model.architecture)
        return info is not None and info.has_mtp_component


@dataclass(frozen=True)
class When:
    """A condition on the context (static) or on knobs sampled earlier (`depends_on`, dynamic)."""

    description: str
    test: Callable[[SpaceContext, Mapping[str, Any]], bool] = field(repr=False, compare=False)
    depends_on: frozenset[str] = frozenset()

    @property
    def is_static(self) -> bool:
        return not self.depends_on

    def holds(self, context: SpaceContext, values: Mapping[str, Any]) -> bool:
        if any(name not in values for name in self.depends_on):
            return False  # a parent that is inactive (or absent from this space) disables the child
        return bool(self.test(context, values))


def on_context(description: str, test: Callable[[SpaceContext], bool]) -> When:
    return When(description, lambda ctx, _values: test(ctx))


def knob_is(name: str, *allowed: Any) -> When:
    """The earlier knob `name` took one of `allowed` (compared by type and value)."""
    text = " or ".join(_show(v) for v in allowed)
    return When(
        f"{name} is {text}",
        lambda _ctx, values: any(type(values[name]) is type(v) and values[name] == v for v in allowed),
        frozenset({name}),
    )


@dataclass(frozen=True)
class ExlArg:
    """An Exl3Args field, passed by the exllamav3 engine to each (callable, keyword) in `targets`."""

    field: str
    targets: tuple[tuple[str, str], ...]

    def describe(self) -> str:
        return ", ".join(f"{callable_}({kw})" for callable_, kw in self.targets)


@dataclass(frozen=True)
class EnvVar:
    """An EXL3_* variable set before exllamav3 is imported. Unset is exllamav3's default."""

    name: str
    exl3_default: str | None  # the value exllamav3 assumes when unset; None: no single value ("auto")

    def describe(self) -> str:
        return f"env {self.name}"

    def render(self, value: Any) -> str | None:
        """The variable's text, or None to leave it unset (exllamav3's default needs no variable)."""
        if value is USE_DEFAULT:
            return None
        text = str(int(value)) if isinstance(value, bool) else str(value)
        return None if text == self.exl3_default else text


@dataclass(frozen=True)
class TransformersArg:
    """A TransformersArgs field of the CPU reference engine."""

    field: str

    def describe(self) -> str:
        return f"transformers {self.field}"


Applied = ExlArg | EnvVar | TransformersArg


@dataclass(frozen=True, kw_only=True)
class Knob:
    """One tunable setting. `default` is exllamav3's own (or the engine's), so defaults = baseline."""

    name: str
    domain: Domain
    default: Any
    applied_as: Applied
    may_change_outputs: bool
    applies_when: tuple[When, ...] = ()
    # Static conditions on single choices of a categorical domain (e.g. draft_mode "mtp")
    choice_requires: tuple[tuple[Any, When], ...] = ()
    # Field value from the knob's value and the earlier ones; None: the value itself (USE_DEFAULT → None)
    to_field: Callable[[Any, Mapping[str, Any]], Any] | None = field(default=None, repr=False, compare=False)
    # Where `default` is USE_DEFAULT outside the domain (exllamav3 decides at run time), the value
    # exllamav3 would choose, from the context and the earlier values: what a knob that a change
    # activates takes (num_draft_tokens under draft_mode=ngram: 4)
    resolved_default: Callable[[SpaceContext, Mapping[str, Any]], Any] | None = field(
        default=None, repr=False, compare=False
    )
    # The domain for a study's context where the context bounds it (a DFlash drafter drafts at most its block
    # size - 1): decided once per study, so each parameter keeps one distribution
    domain_for_context: Callable[[Domain, SpaceContext], Domain] | None = field(default=None, repr=False,
                                                                                compare=False)
    note: str = ""
    # Values a study tries first, one change each after the baseline, before the sampler combines knobs
    # (SearchSpace.levers): the settings known to move a rate on their own (drafting, prefill chunks),
    # so that a short study measures them instead of waiting for a random draw to reach them
    levers: tuple[Any, ...] = ()

    @property
    def depends_on(self) -> frozenset[str]:
        return frozenset().union(*(w.depends_on for w in self.applies_when))

    def applies_to(self, context: SpaceContext) -> bool:
        """The static part of `applies_when`: does this knob exist for this model and these options?"""
        return all(w.holds(context, {}) for w in self.applies_when if w.is_static)

    def is_active(self, context: SpaceContext, values: Mapping[str, Any]) -> bool:
        return all(w.holds(context, values) for w in self.applies_when)

    def default_under(self, context: SpaceContext, values: Mapping[str, Any]) -> Any:
        """The default as a value of the domain where the knob has a resolved one, else `default`."""
        if self.resolved_default is not None and not self.domain.contains(self.default):
            return self.resolved_default(context, values)
        return self.default

    def field_value(self, value: Any, values: Mapping[str, Any]) -> Any:
        if self.to_field is not None:
            return self.to_field(value, values)
        return None if value is USE_DEFAULT else value

    def describe_when(self) -> str:
        return " and ".join(w.description for w in self.applies_when) or "always"


def _show(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)
