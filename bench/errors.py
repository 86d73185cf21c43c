"""Errors the bench package raises on purpose.

    TunerError
    └── BenchError
        ├── BenchConfigError     a plan or CLI value is invalid (also a ValueError)
        ├── CorpusError          the bundled prompt corpus is missing or does not match its pins
        └── MissingMetric        a comparison asked for a metric one side (or the noise floor) lacks

What the server does wrong (no answer, an error status, a broken stream, not the OpenAI shape) is
the client's tree (`openai_client.errors`), raised by the client or by bench where a server's answer
is not what it needs; `run_bench` raises those and these.

A failed *measured* request is not an exception: it is data (`RequestResult.ok is False` with its
`error`), and the point it belongs to records it as an invalid run.
"""

from __future__ import annotations

from tuner_errors import TunerError

__all__ = ["BenchConfigError", "BenchError", "CorpusError", "MissingMetric"]


class BenchError(TunerError):
    """Base for every error the bench package raises on purpose."""


class BenchConfigError(BenchError, ValueError):
    """A plan or CLI value is invalid. The message names the value and what is allowed."""


class CorpusError(BenchError):
    """The bundled corpus cannot be read or rebuilt."""


class MissingMetric(BenchError):
    """A comparison needs a metric that one side, or the noise floor, did not measure."""
