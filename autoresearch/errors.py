"""Errors raised on purpose by the autoresearch loop.

    AutoresearchError
    ├── PlanError          a CLI value or combination is invalid (also a ValueError)
    ├── ModelSourceError   the model cannot be found, downloaded or verified
    └── StudyError         the stored study does not match this run (directions, engine, model)
"""

from __future__ import annotations

__all__ = ["AutoresearchError", "ModelSourceError", "PlanError", "StudyError"]


class AutoresearchError(Exception):
    """Base for every error the loop raises on purpose."""


class PlanError(AutoresearchError, ValueError):
    """A CLI value or combination is invalid; the message says which and what to do."""


class ModelSourceError(AutoresearchError):
    """The model folder or Hub repository cannot be used; the message names the file or revision."""


class StudyError(AutoresearchError):
    """The stored study cannot be continued by this run."""
