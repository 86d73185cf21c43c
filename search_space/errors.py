"""Errors raised on purpose by the search_space package.

    TunerError
    └── SearchSpaceError
        ├── CatalogError           the catalog itself is inconsistent (a default outside its domain, ...)
        ├── CatalogMismatch        the installed exllamav3 lacks an argument or variable a knob needs
        ├── SpaceError             a pinned value or a sampled parameter does not fit the space (ValueError)
        ├── ModelInfoError         the checkpoint's config or safetensors headers cannot be read
        ├── BudgetError            a VRAM budget is malformed or cannot be determined (ValueError)
        └── DoesNotFit             a configuration's predicted peak VRAM exceeds the budget; `.excess_bytes`

Invalid ServingConfig objects are refused by `serving.config` itself (serving.errors.ConfigError).
"""

from __future__ import annotations

from tuner_errors import TunerError

__all__ = [
    "BudgetError",
    "CatalogError",
    "CatalogMismatch",
    "DoesNotFit",
    "ModelInfoError",
    "SearchSpaceError",
    "SpaceError",
]


class SearchSpaceError(TunerError):
    """Base for every error the search_space package raises on purpose."""


class CatalogError(SearchSpaceError):
    """The knob catalog is inconsistent; the message names the knob. A bug in the catalog data."""


class CatalogMismatch(SearchSpaceError):
    """A knob applies an argument or environment variable the installed exllamav3 does not have."""


class SpaceError(SearchSpaceError, ValueError):
    """A pinned knob value or a trial's parameter is unknown or outside the knob's domain."""


class ModelInfoError(SearchSpaceError):
    """A model directory cannot be read: missing config.json, or a malformed safetensors header."""


class BudgetError(SearchSpaceError, ValueError):
    """A VRAM budget string is malformed, or no budget was given and no GPU could be queried."""


class DoesNotFit(SearchSpaceError):
    """The configuration's predicted peak VRAM exceeds the budget: by `.excess_bytes` (the message has the rest)."""

    def __init__(self, message: str, *, excess_bytes: int):
        super().__init__(message)
        self.excess_bytes = excess_bytes
