"""The start-up check: every knob's argument and variable must exist in the installed exllamav3.

exllamav3's Generator silently ignores keywords it does not know, so a knob renamed upstream would
measure the default under another name. This check reads the installed source (no CUDA needed)
and refuses to run, naming the knob, when anything is missing. It also checks each knob against
the serving config schema and the catalog's own consistency.

Usage:
    check_catalog(EXL3_KNOBS)                     # installed exllamav3; raises CatalogMismatch
    check_catalog(EXL3_KNOBS, surface=read_surface(Path("copy/of/exllamav3")))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from search_space.errors import CatalogError, CatalogMismatch
from search_space.knobs import EnvVar, ExlArg, Knob, TransformersArg
from serving.config import Exl3Args, TransformersArgs
from serving.errors import SurfaceMismatch
from serving.exl3_surface import Exl3Surface, installed_surface

__all__ = ["check_catalog", "validate_catalog"]

_EXL3_FIELDS = frozenset(f.name for f in dataclasses.fields(Exl3Args))
_TRANSFORMERS_FIELDS = frozenset(f.name for f in dataclasses.fields(TransformersArgs))


def check_catalog(knobs: Sequence[Knob], surface: Exl3Surface | None = None) -> None:
    """Refuse a catalog whose exllamav3 knobs name what the installed exllamav3 lacks.

    Raises:
        CatalogError: the catalog is inconsistent (see validate_catalog).
        CatalogMismatch: a knob's keyword or environment variable is missing; the message names the knob.
    """
    validate_catalog(knobs)
    exl3_knobs = [k for k in knobs if isinstance(k.applied_as, ExlArg | EnvVar)]
    if not exl3_knobs:
        return
    try:
        surface = surface or installed_surface()
    except SurfaceMismatch as exc:
        raise CatalogMismatch(f"cannot check the exllamav3 knobs: {exc}") from exc
    for knob in exl3_knobs:
        applied = knob.applied_as
        try:
            if isinstance(applied, EnvVar):
                surface.require_env([applied.name])
            else:
                for callable_name, keyword in applied.targets:
                    surface.require(callable_name, [keyword])
        except SurfaceMismatch as exc:
            raise CatalogMismatch(
                f"knob {knob.name!r} is applied as {applied.describe()}, but {exc}. "
                f"Update the catalog (search_space/catalog.py) for exllamav3 {surface.version}, "
                f"or install the exllamav3 version this project pins"
            ) from exc


def validate_catalog(knobs: Sequence[Knob]) -> None:
    """Catalog invariants: unique names, parents before children, finite parents, known fields.

    Raises:
        CatalogError: naming the knob that breaks an invariant.
    """
    seen: dict[str, Knob] = {}
    for knob in knobs:
        if knob.name in seen:
            raise CatalogError(f"knob {knob.name!r} appears twice in the catalog")
        for parent in sorted(knob.depends_on):
            if parent not in seen:
                raise CatalogError(f"knob {knob.name!r} depends on {parent!r}, which must come earlier")
            if not seen[parent].domain.is_finite:
                raise CatalogError(f"knob {knob.name!r} depends on {parent!r}, whose domain is not finite")
        _check_field(knob)
        for lever in knob.levers:
            if not knob.domain.contains(lever):
                raise CatalogError(f"knob {knob.name!r} names lever {lever!r}, which is not in its domain")
        for choice, _when in knob.choice_requires:
            if not knob.domain.contains(choice):
                raise CatalogError(f"knob {knob.name!r} restricts choice {choice!r}, which is not in its domain")
        seen[knob.name] = knob


def _check_field(knob: Knob) -> None:
    applied = knob.applied_as
    if isinstance(applied, ExlArg) and applied.field not in _EXL3_FIELDS:
        raise CatalogError(f"knob {knob.name!r} sets Exl3Args.{applied.field}, which serving.config lacks")
    if isinstance(applied, TransformersArg) and applied.field not in _TRANSFORMERS_FIELDS:
        raise CatalogError(f"knob {knob.name!r} sets TransformersArgs.{applied.field}, which serving.config lacks")
    if isinstance(applied, ExlArg) and not applied.targets:
        raise CatalogError(f"knob {knob.name!r} names no exllamav3 argument to check")
