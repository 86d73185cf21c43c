"""Errors raised on purpose by the eval package.

TunerError
└── EvalError
    ├── EvalConfigError        a suite, policy, probe set or CLI value is invalid (also a ValueError)
    ├── LockError              a file in locks/ is malformed or lacks an entry
    ├── MissingEnvironment     a suite's taskset package is not installed (run `python -m eval setup`)
    ├── MissingDataset         a pinned dataset is not in the local cache (run `python -m eval data NAME`)
    ├── DataIntegrityError     a cached or downloaded file does not match its pinned size or hash
    ├── SourceUnavailable      GitHub or the Hub cannot be reached, or a git/pip step failed
    ├── RuntimeUnavailable     the suite's runtime (the local Docker engine) is not usable
    ├── EndpointError          the server under test refused a request or answered off-contract
    ├── MissingReference       no stored fidelity reference for this model manifest and probe set
    ├── ProbeMismatch          a server tokenizes a probe differently from the reference
    └── TasksetRunError        a verifiers run of one taskset crashed, or wrote an episode that cannot be paired
"""

from __future__ import annotations

from tuner_errors import TunerError

__all__ = [
    "DataIntegrityError",
    "EndpointError",
    "EvalConfigError",
    "EvalError",
    "LockError",
    "MissingDataset",
    "MissingEnvironment",
    "MissingReference",
    "ProbeMismatch",
    "RuntimeUnavailable",
    "SourceUnavailable",
    "TasksetRunError",
]


class EvalError(TunerError):
    """Base for every error the eval package raises on purpose."""


class EvalConfigError(EvalError, ValueError):
    """A suite, policy, probe set or CLI value is invalid; the message names the key and what is allowed."""


class LockError(EvalError):
    """A lock file is malformed or lacks the entry a suite needs."""


class MissingEnvironment(EvalError):
    """A taskset package a suite needs is not importable. `.names` lists every missing one."""

    def __init__(self, message: str, *, names: tuple[str, ...] = ()):
        super().__init__(message)
        self.names = names


class MissingDataset(EvalError):
    """A pinned dataset file is not in the local cache. `.names` lists every missing dataset."""

    def __init__(self, message: str, *, names: tuple[str, ...] = ()):
        super().__init__(message)
        self.names = names


class DataIntegrityError(EvalError):
    """A file's size or hash differs from its pin. Nothing is repaired silently."""


class SourceUnavailable(EvalError):
    """A network source (GitHub, the Hub) cannot be reached, or a git/pip step failed."""


class RuntimeUnavailable(EvalError):
    """The suite's verifiers runtime cannot run here (no Docker engine); the message says what to do."""


class EndpointError(EvalError):
    """The server under test refused a request or answered outside the documented contract.

    `status_code` is the HTTP status where there was one.
    """

    def __init__(self, message: str, *, status_code: int | None = None):
        super().__init__(message)
        self.status_code = status_code


class MissingReference(EvalError):
    """No stored fidelity reference for this model manifest and probe-set digest."""


class ProbeMismatch(EvalError):
    """The server under test tokenizes or answers a probe differently from the reference's server."""


class TasksetRunError(EvalError):
    """The verifiers run of one taskset crashed as a process, or wrote an episode without a task key.
    `.log_tail` holds the end of its log."""

    def __init__(self, message: str, *, log_tail: str = ""):
        super().__init__(message)
        self.log_tail = log_tail
