"""Errors the bench package raises on purpose.

    BenchError
    ├── BenchConfigError     a plan or CLI value is invalid (also a ValueError)
    ├── CorpusError          the bundled prompt corpus is missing or does not match its pins
    ├── ServerUnreachable    no HTTP answer from the server at all (refused, timed out, reset)
    ├── ServerRejected       the server answered a request with an error status (auth, unknown model, 4xx)
    ├── StreamError          a started stream broke: an error event, or an event that is not a JSON object
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
    "StreamError",
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
    """The server answered with an error status; `.status` and `.detail` (the server's message) say why."""

    def __init__(self, message: str, *, status: int, detail: str = ""):
        super().__init__(message)
        self.status = status
        self.detail = detail


class StreamError(BenchError):
    """A stream the server had started broke: it sent an error event, or an event that is not JSON."""


class ProtocolError(BenchError):
    """The server's answer is not the OpenAI shape bench relies on (e.g. no usage.prompt_tokens)."""


class MissingMetric(BenchError):
    """A comparison needs a metric that one side, or the noise floor, did not measure."""
