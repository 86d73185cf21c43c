"""The project's one client for OpenAI-compatible servers: `Endpoint`, `Client`, `AsyncClient`, and
the one reader of their server-sent events.

serving (its launcher polls /health), bench and eval all talk to servers through it, and it imports
none of them, so the server under test never imports its measurers (tests/test_import_rule.py).

Usage:
    from openai_client import Client, Endpoint
    with Client(Endpoint(url="http://127.0.0.1:18020"), timeout_s=60) as client:
        model = client.served_model()
        with client.open_stream("/v1/chat/completions", body) as stream:
            for event in stream: ...             # SSEEvent(received_at, chunk)
"""

from openai_client.client import (
    Api,
    AsyncClient,
    Client,
    Endpoint,
    EventStream,
    build_body,
    chunk_text,
    parse_usage,
)
from openai_client.errors import (
    ClientConfigError,
    ClientError,
    ProtocolError,
    ServerRejected,
    ServerUnreachable,
    StreamError,
)
from openai_client.sse import DONE, SSEDecoder, SSEEvent

__all__ = [
    "DONE",
    "Api",
    "AsyncClient",
    "Client",
    "ClientConfigError",
    "ClientError",
    "Endpoint",
    "EventStream",
    "ProtocolError",
    "SSEDecoder",
    "SSEEvent",
    "ServerRejected",
    "ServerUnreachable",
    "StreamError",
    "build_body",
    "chunk_text",
    "parse_usage",
]
