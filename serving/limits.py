"""What one request or connection may cost the server before it is refused: one frozen record."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RequestLimits"]


@dataclass(frozen=True)
class RequestLimits:
    """Defaults suit loopback use; `python -m serving` takes each as a flag."""

    max_body_bytes: int = 8 * 1024 * 1024  # 413 beyond: a 32K-token prompt is ~130 KB of text
    body_timeout_s: float = 30.0  # 408 when the body has not fully arrived by then
    header_timeout_s: float = 10.0  # the socket is closed when a request's headers take longer
    max_connections: int = 256  # requests and connections at once, 503 beyond; 4x this many sockets at most
