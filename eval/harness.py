"""A one-turn, tool-free chat harness that runs inside the verifiers worker process.

Why: verifiers' stock `null` harness is a PEP 723 uv script, so its first use needs `uv` and PyPI
(openai, mcp, httpx, ...) and takes tens of seconds to set up; CI and the offline suite must not
depend on that. This harness does what `null` does for a taskset without tools: it sends the
system prompt and the prompt as one streamed chat request (`stream_options.include_usage`, as the
stock harness does) to the verifiers interception endpoint with the rollout's secret, and returns.
Model, sampling and max_tokens are forced by the interception server, and every call is recorded in
the trace there, exactly as for `null` (verifiers' Harness contract allows an in-process loop).

The request goes through openai_client's AsyncClient (the project's one client and SSE reader) with the
same wire behaviour: a streamed request with `stream_options.include_usage` and the Bearer secret;
a usage chunk and [DONE] are required; a failed connection is verifiers' model transport error.

Usage: --env.agent.harness.id eval-chat (after eval.plugins.register_plugins())
"""

from __future__ import annotations

import verifiers.v1 as vf
from verifiers.v1.errors import MODEL_TRANSPORT_ERROR_EXIT_CODE

from openai_client import AsyncClient, Endpoint, ServerRejected, ServerUnreachable, StreamError

__all__ = ["InProcessChatHarness"]


class InProcessChatConfig(vf.HarnessConfig):
    request_timeout_s: float = 3600.0


class InProcessChatHarness(vf.Harness[InProcessChatConfig]):
    APPENDS_SYSTEM_PROMPT = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, **_) -> vf.ProgramResult:
        system, prompt = self.resolve_text_prompt(data)
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": prompt or ""}
        ]
        body = {
            "model": ctx.model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        # verifiers hands the interception URL with /v1 (rollout.py: base_url + "/v1"); Endpoint keeps
        # the root and the client adds /v1, so the request goes to the same {endpoint}/chat/completions.
        interception = Endpoint(url=endpoint, api_key=secret)  # the rollout's secret, sent as Bearer
        content: list[str] = []
        saw_usage = saw_done = False
        try:
            async with AsyncClient(
                interception, timeout_s=self.config.request_timeout_s, connect_timeout_s=30
            ) as client:
                async with client.open_stream("/v1/chat/completions", body) as stream:
                    async for event in stream:
                        saw_usage = saw_usage or bool(event.chunk.get("usage"))
                        content.extend(_content(event.chunk))
                    saw_done = stream.done
        except ServerUnreachable as exc:
            return vf.ProgramResult(MODEL_TRANSPORT_ERROR_EXIT_CODE, "", f"model call failed: {exc!r}")
        except ServerRejected as exc:
            return vf.ProgramResult(1, "", f"chat/completions answered {exc.status}: {exc.detail[:2000]}")
        except StreamError as exc:
            return vf.ProgramResult(1, "", f"the chat stream failed: {exc}")
        if not (saw_done and saw_usage):
            return vf.ProgramResult(1, "", "the chat stream ended without a usage chunk and [DONE]")
        return vf.ProgramResult(0, "".join(content), "")


def _content(chunk: dict) -> list[str]:
    """The answer text of one chunk (delta.content only, as the stock harness keeps it)."""
    deltas = (choice.get("delta") or {} for choice in chunk.get("choices") or [])
    return [d["content"] for d in deltas if d.get("content")]
