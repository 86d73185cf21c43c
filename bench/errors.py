"""Errors the bench package raises on purpose.

    BenchError
    ├── BenchConfigError     a plan or CLI value is invalid (also a ValueError)
    ├── CorpusError          the bundled prompt corpus is missing or does not match its pins
    ├── ServerUnreachable    no HTTP answer from the server at all (refused, timed out, reset)
    ├── ServerRejected       the server refused the set-up requests (auth, unknown model, 4xx)
    ├── ProtocolError        the server answered, but not in the OpenAI shape bench needs
    └── MissingMetric        a comparison asked for a metric one side (or the noise floor) lacks

A failed *measured* request is not an exception: it is data (`RequestResult.ok is False` with its
`error`), and the point it belongs to records it as an invalid run.
"""

from __future__ import annotations

__all__ = [
    "BenchConfigError",
    "BenchError",
    "CorpusError",
    "MissingMetric",
    "ProtocolError",
    "ServerRejected",
    "ServerUnreachable",
]


class BenchError(Exception):
    """Base for every error the bench package raises on purpose."""


class BenchConfigError(BenchError, ValueError):
    """A plan or CLI value is invalid. The message names the value and what is allowed."""


class CorpusError(BenchError):
    """The bundled corpus cannot be read or rebuilt."""


class ServerUnreachable(BenchError):
    """The server gave no HTTP answer (connection refused, reset or timed out)."""


class ServerRejected(BenchError):
    """The server answered a set-up request with an error status; `.status` and the body say why."""

    def __init__(self, message: str, *, status: int):
        super().__init__(message)
        self.status = status


class ProtocolError(BenchError):
    """The server's answer is not the OpenAI shape bench relies on (e.g. no usage.prompt_tokens)."""


class MissingMetric(BenchError):
    """A comparison needs a metric that one side, or the noise floor, did not measure."""
