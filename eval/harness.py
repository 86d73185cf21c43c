"""A one-turn, tool-free chat harness that runs inside the verifiers worker process.

Why: verifiers' stock `null` harness is a PEP 723 uv script, so its first use needs `uv` and PyPI
(openai, mcp, httpx, ...) and takes tens of seconds to set up; CI and the offline suite must not
depend on that. This harness does what `null` does for a taskset without tools: it sends the
system prompt and the prompt as one streamed chat request (`stream_options.include_usage`, as the
stock harness does) to the verifiers interception endpoint with the rollout's secret, and returns.
Model, sampling and max_tokens are forced by the interception server, and every call is recorded in
the trace there, exactly as for `null` (verifiers' Harness contract allows an in-process loop).

Usage: --env.agent.harness.id eval-chat (after eval.plugins.register_plugins())
"""

from __future__ import annotations

import json

import httpx
import verifiers.v1 as vf
from verifiers.v1.errors import MODEL_TRANSPORT_ERROR_EXIT_CODE

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
        content: list[str] = []
        saw_usage = saw_done = False
        try:
            async with httpx.AsyncClient(
                timeout=httpx.Timeout(self.config.request_timeout_s, connect=30)
            ) as http:
                async with http.stream(
                    "POST",
                    f"{endpoint.rstrip('/')}/chat/completions",
                    json=body,
                    headers={"Authorization": f"Bearer {secret}"},
                ) as response:
                    if response.status_code != 200:
                        text = (await response.aread()).decode(errors="replace")
                        return vf.ProgramResult(
                            1, "", f"chat/completions answered {response.status_code}: {text[:2000]}"
                        )
                    async for line in response.aiter_lines():
                        if not line.startswith("data:"):
                            continue
                        payload = line[5:].strip()
                        if payload == "[DONE]":
                            saw_done = True
                            break
                        chunk = json.loads(payload)
                        if chunk.get("usage"):
                            saw_usage = True
                        for choice in chunk.get("choices") or []:
                            delta = choice.get("delta") or {}
                            if delta.get("content"):
                                content.append(delta["content"])
        except httpx.HTTPError as exc:
            return vf.ProgramResult(MODEL_TRANSPORT_ERROR_EXIT_CODE, "", f"model call failed: {exc!r}")
        if not (saw_done and saw_usage):
            return vf.ProgramResult(1, "", "the chat stream ended without a usage chunk and [DONE]")
        return vf.ProgramResult(0, "".join(content), "")
