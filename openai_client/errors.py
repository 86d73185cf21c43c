"""Errors the openai_client package raises on purpose.

    TunerError
    └── ClientError
        ├── ClientConfigError    an endpoint or key file is invalid (also a ValueError)
        ├── ServerUnreachable    no HTTP answer from the server at all (refused, timed out, reset)
        ├── ServerRejected       the server answered a request with an error status (auth, unknown model, 4xx)
        ├── StreamError          a started stream broke: an error event, or an event that is not a JSON object
        └── ProtocolError        the server answered, but not in the OpenAI shape the caller needs

bench and eval raise ServerUnreachable, ServerRejected and ProtocolError themselves where a server's
answer, read through this client, is not what they need: they are facts about the server.
"""

from __future__ import annotations

from tuner_errors import TunerError

__all__ = [
    "ClientConfigError",
    "ClientError",
    "ProtocolError",
    "ServerRejected",
    "ServerUnreachable",
    "StreamError",
]


class ClientError(TunerError):
    """Base for every error the openai_client package raises on purpose."""


class ClientConfigError(ClientError, ValueError):
    """An endpoint or key file is invalid. The message names the value and what is allowed."""


class ServerUnreachable(ClientError):
    """The server gave no HTTP answer (connection refused, reset or timed out)."""


class ServerRejected(ClientError):
    """The server answered with an error status; `.status` and `.detail` (the server's message) say why."""

    def __init__(self, message: str, *, status: int, detail: str = ""):
        super().__init__(message)
        self.status = status
        self.detail = detail


class StreamError(ClientError):
    """A stream the server had started broke: it sent an error event, or an event that is not JSON."""


class ProtocolError(ClientError):
    """The server's answer is not the OpenAI shape the caller relies on (e.g. no usage.prompt_tokens)."""
