"""The search space of one study: the catalog narrowed to a model and the user's options.

Static conditions (the model is hybrid, has MTP weights, a DFlash draft was given) are decided
here once; dynamic ones (num_draft_tokens only with a draft mode) are decided per trial while
walking the knobs in catalog order. Knob values become a `ServingConfig` through
`ServingConfig.from_dict`, so validation stays in serving.config.

Usage:
    space = build_space(SpaceContext(engine="exllamav3", model=read_model_info(model_dir)))
    space.baseline_config()          # stock exllamav3: every knob at exllamav3's default
    space.size()                     # distinct parameter assignments
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from search_space.catalog import catalog_for
from search_space.domains import Categorical
from search_space.errors import CatalogError, CatalogMismatch, SpaceError
from search_space.knobs import EnvVar, Knob, SpaceContext
from search_space.surface_check import check_catalog, validate_catalog
from serving.config import DRAFT_CHECKPOINT_MODES, ServingConfig
from serving.drafter import Drafter, check_same_vocabulary
from serving.errors import ConfigError, SurfaceMismatch
from serving.exl3_surface import Exl3Surface, installed_surface

__all__ = ["SearchSpace", "build_space"]

_ABSENT = object()


@dataclass(frozen=True)
class SearchSpace:
    """The knobs that can apply to this study's model, with their domains narrowed, and pinned values."""

    context: SpaceContext
    knobs: tuple[Knob, ...]
    pinned: Mapping[str, Any] = field(default_factory=dict)

    def knob(self, name: str) -> Knob:
        for knob in self.knobs:
            if knob.name == name:
                return knob
        raise SpaceError(f"no knob {name!r} in this space; it has: {', '.join(k.name for k in self.knobs)}")

    @property
    def searched(self) -> tuple[Knob, ...]:
        """The knobs a trial samples (the pinned ones are fixed)."""
        return tuple(k for k in self.knobs if k.name not in self.pinned)

    def walk(self, pick: Callable[[Knob, Mapping[str, Any]], Any]) -> dict[str, Any]:
        """Values of the knobs active under the values picked so far, in catalog order.

        `pick(knob, values_so_far)` gives each active, unpinned knob's value.
        """
        values: dict[str, Any] = {}
        for knob in self.knobs:
            if knob.is_active(self.context, values):
                values[knob.name] = self.pinned[knob.name] if knob.name in self.pinned else pick(knob, values)
        return values

    def baseline_values(self) -> dict[str, Any]:
        """Every active knob at its default: stock exllamav3 (or the CPU engine's defaults)."""
        return self.values_with({})

    def values_with(self, changes: Mapping[str, Any]) -> dict[str, Any]:
        """The defaults with `changes`; a knob that a change activates takes its default unless named.

        Raises:
            SpaceError: a change is outside its knob's domain, or names a knob inactive under the others.
            CatalogError: an active knob's default lies outside its (narrowed) domain.
        """

        def value(knob: Knob, values: Mapping[str, Any]) -> Any:
            if knob.name in changes:
                if not knob.domain.contains(changes[knob.name]):
                    raise SpaceError(f"{knob.name}={changes[knob.name]!r} is outside {knob.domain.describe()}")
                return changes[knob.name]
            default = knob.default_under(self.context, values)
            if not knob.domain.contains(default):
                raise CatalogError(
                    f"knob {knob.name!r} default {default!r} is not in its domain {knob.domain.describe()} "
                    f"for this model, so the baseline cannot be enqueued; pin the knob"
                )
            return default

        values = self.walk(value)
        inactive = sorted(set(changes) - set(values))
        if inactive:
            knob = self.knob(inactive[0])
            raise SpaceError(f"{knob.name} does not apply with these values: it needs {knob.describe_when()}")
        return values

    def levers(self, baseline: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], ...]:
        """The catalog's levers that this study can try, one change each on top of `baseline` (changes to
        the defaults), in catalog order: a value the narrowed domain lacks (MTP without MTP weights, a
        drafter without --draft-model), a pinned knob, a knob inactive under the baseline, and the
        baseline's own value are left out."""
        base = self.values_with(baseline or {})
        out = []
        for knob in self.searched:
            for value in knob.levers:
                if not knob.domain.contains(value) or base.get(knob.name, _ABSENT) == value:
                    continue
                try:
                    self.values_with({**(baseline or {}), knob.name: value})
                except SpaceError:  # inactive under the baseline's values
                    continue
                out.append({knob.name: value})
        return tuple(out)

    def baseline_config(self) -> ServingConfig:
        return self.to_config(self.baseline_values())

    def to_config(self, values: Mapping[str, Any]) -> ServingConfig:
        """The ServingConfig for knob values (as `walk` produces them).

        Raises:
            serving.errors.ConfigError: the values break a rule of the serving config (a catalog bug).
        """
        args: dict[str, Any] = {}
        env: dict[str, str] = {}
        for name, value in values.items():
            knob = self.knob(name)
            applied = knob.applied_as
            if isinstance(applied, EnvVar):
                text = applied.render(value)
                if text is not None:
                    env[applied.name] = text
            else:
                field_value = knob.field_value(value, values)
                if field_value is not None:
                    args[applied.field] = field_value
        if args.get("draft_mode") in DRAFT_CHECKPOINT_MODES:
            args["draft_model_dir"] = str(self.context.draft_model.directory)
        return ServingConfig.from_dict({"engine": self.context.engine, "args": args, "env": env})

    def size(self) -> int | float:
        """Distinct parameter assignments of the searched knobs (math.inf with a continuous domain)."""
        return _traverse(self, set())


def build_space(
    context: SpaceContext,
    *,
    pinned: Mapping[str, Any] | None = None,
    surface: Exl3Surface | None = None,
) -> SearchSpace:
    """Narrow the engine's catalog to this model and options; for exllamav3, check it first.

    Raises:
        CatalogMismatch: the installed exllamav3 lacks a knob's argument or variable (exllamav3 engine).
        SpaceError: a pinned knob is unknown, does not apply, or has a value outside its domain;
            a draft model was given to the CPU engine, or one that exllamav3 cannot draft with or
            whose vocabulary is not the model's.
    """
    catalog = catalog_for(context.engine)
    if context.engine == "exllamav3":
        check_catalog(catalog, surface)
        if context.surface is None:
            try:
                context = dataclasses.replace(context, surface=surface or installed_surface())
            except SurfaceMismatch as exc:
                raise CatalogMismatch(f"cannot read the installed exllamav3: {exc}") from exc
    else:
        validate_catalog(catalog)
    if context.draft_model is not None:
        _check_drafter(context)
    knobs = tuple(_narrowed(k, context) for k in catalog if k.applies_to(context))
    candidate = SearchSpace(context=context, knobs=knobs, pinned=dict(pinned or {}))
    reachable: set[str] = set()
    _traverse(candidate, reachable)
    space = dataclasses.replace(candidate, knobs=tuple(k for k in knobs if k.name in reachable))
    _check_pinned(space, catalog)
    return space


def _check_drafter(context: SpaceContext) -> None:
    """The user's draft checkpoint must be one exllamav3 drafts with, of the model's vocabulary."""
    draft = context.draft_model
    if context.engine != "exllamav3":
        raise SpaceError("a draft model applies only to the exllamav3 engine")
    try:
        kind = context.draft_kind
        check_same_vocabulary(context.model.directory, Drafter(directory=draft.directory,
                                                               architecture=draft.architecture, kind=kind))
    except ConfigError as exc:
        raise SpaceError(str(exc)) from exc


def _narrowed(knob: Knob, context: SpaceContext) -> Knob:
    """The domain this context allows, less the categorical choices whose static requirement fails for it."""
    if knob.domain_for_context is not None:
        knob = dataclasses.replace(knob, domain=knob.domain_for_context(knob.domain, context))
    if not knob.choice_requires:
        return knob
    excluded = {(type(c), c) for c, when in knob.choice_requires if not when.holds(context, {})}
    if not excluded:
        return knob
    assert isinstance(knob.domain, Categorical)  # validate_catalog checked the choices exist
    return dataclasses.replace(knob, domain=knob.domain.restricted(lambda c: (type(c), c) not in excluded))


def _check_pinned(space: SearchSpace, catalog: tuple[Knob, ...]) -> None:
    names = {k.name for k in space.knobs}
    for name, value in space.pinned.items():
        if name not in names:
            known = next((k for k in catalog if k.name == name), None)
            if known is None:
                raise SpaceError(f"cannot pin unknown knob {name!r}; knobs here: {', '.join(sorted(names))}")
            raise SpaceError(f"cannot pin {name!r}: it does not apply to this model ({known.describe_when()})")
        knob = space.knob(name)
        if not knob.domain.contains(value):
            raise SpaceError(f"cannot pin {name!r} to {value!r}; its domain is {knob.domain.describe()}")


def _traverse(space: SearchSpace, reachable: set[str]) -> int | float:
    """Count assignments, branching only on knobs that others depend on; record knobs ever active."""
    parents = frozenset().union(*(k.depends_on for k in space.knobs))

    def count(index: int, values: dict[str, Any]) -> int | float:
        if index == len(space.knobs):
            return 1
        knob = space.knobs[index]
        if not knob.is_active(space.context, values):
            return count(index + 1, values)
        reachable.add(knob.name)
        if knob.name in space.pinned:
            return count(index + 1, {**values, knob.name: space.pinned[knob.name]})
        if knob.name in parents:
            return sum(count(index + 1, {**values, knob.name: v}) for v in knob.domain.values())
        rest = count(index + 1, {**values, knob.name: knob.default})
        return knob.domain.size * rest if rest else 0

    total = count(0, {})
    return total if math.isinf(total) else int(total)
