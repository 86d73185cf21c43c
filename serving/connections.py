"""Connection limits uvicorn lacks: a deadline for each request's headers, and a hard cap on sockets.

uvicorn's keep-alive timer runs only between requests, and its `limit_concurrency` answers 503 only
once a request's headers are in, so a client that opens sockets and never finishes its headers
(slowloris, or thousands of idle connections) holds file descriptors until /health itself cannot be
reached. Here a socket must complete each request's headers within `header_timeout_s` of its first
byte (or of connecting), and sockets beyond `max_open` are closed as soon as they connect.

Usage:
    protocol = guarded_protocol(HttpToolsProtocol, header_timeout_s=10, max_open=1024)
    uvicorn.Config(app, http=protocol, ...)
"""

from __future__ import annotations

import asyncio

__all__ = ["guarded_protocol"]


def guarded_protocol(base: type, *, header_timeout_s: float, max_open: int) -> type:
    """A subclass of uvicorn's httptools protocol class `base` with both limits."""

    class GuardedProtocol(base):
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            if len(self.connections) > max_open:
                transport.close()
                return
            self._arm()

        def data_received(self, data: bytes) -> None:
            between_requests = self.cycle is None or self.cycle.response_complete
            if self._header_timer is None and between_requests:
                self._arm()  # a new request begins: its headers have their own deadline
            super().data_received(data)

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._header_timer = self.loop.call_later(header_timeout_s, self._headers_too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if not self.transport.is_closing():
                self.transport.close()

    return GuardedProtocol
