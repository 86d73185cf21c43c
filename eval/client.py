"""The fidelity stage's HTTP client: greedy continuations and teacher-forced scoring over /v1/completions.

It relies on three request extensions documented in serving/README.md (and offered by vLLM-style
servers): `return_tokens_as_token_ids` so token identities are exact ("token_id:N"), `echo` with
`logprobs` to score given tokens, and `score_decode_from` so the scored tokens run one at a time
through the decode path (the KV cache and decode kernels a candidate changes), as in generation.

Usage:
    with CompletionsClient("http://127.0.0.1:18020", api_key=None) as client:
        prompt_ids, continuation = client.greedy(prompt_text, max_tokens=64)
        scores = client.teacher_force("math-0", prompt_ids, continuation, top_k=20)
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

import httpx

from eval.errors import EndpointError, ProbeMismatch
from eval.records import ProbeScores, TopK

__all__ = ["CompletionsClient"]

log = logging.getLogger(__name__)
_TOKEN_ID = re.compile(r"^token_id:(\d+)$")


def _token_id(token: str) -> int:
    match = _TOKEN_ID.match(token)
    if match is None:
        raise EndpointError(
            f"logprob token {token!r} is not 'token_id:N': the server ignored return_tokens_as_token_ids, "
            "which fidelity needs for exact token identities"
        )
    return int(match.group(1))


class CompletionsClient:
    """One server under test. Greedy, concurrency 1: fidelity needs a fixed batch shape."""

    def __init__(self, base_url: str, *, api_key: str | None = None, timeout_s: float = 900.0):
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.base_url = base_url.rstrip("/").removesuffix("/v1")  # the server root; paths add /v1
        self._http = httpx.Client(
            base_url=self.base_url, headers=headers, timeout=httpx.Timeout(timeout_s, connect=10.0)
        )
        self._model: str | None = None

    def __enter__(self) -> CompletionsClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _request(self, method: str, path: str, body: dict | None = None) -> dict[str, Any]:
        try:
            response = self._http.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise EndpointError(f"{method} {self.base_url}{path} failed: {exc}") from exc
        if response.status_code != 200:
            raise EndpointError(
                f"{method} {self.base_url}{path} answered {response.status_code}: {response.text[:500]}",
                status_code=response.status_code,
            )
        try:
            return response.json()
        except ValueError as exc:
            raise EndpointError(
                f"{method} {self.base_url}{path} answered non-JSON: {response.text[:200]}"
            ) from exc

    @property
    def model(self) -> str:
        """The one served model's id, from /v1/models."""
        if self._model is None:
            data = self._request("GET", "/v1/models").get("data") or []
            if not data:
                raise EndpointError(f"{self.base_url}/v1/models lists no model")
            self._model = str(data[0]["id"])
        return self._model

    def server_info(self) -> dict[str, Any] | None:
        """The server's /v1/server_info (engine, versions, config digest), or None for a peer without it."""
        try:
            return self._request("GET", "/v1/server_info")
        except EndpointError as exc:
            if exc.status_code == 404:
                return None
            raise

    def _complete(self, body: dict[str, Any]) -> dict[str, Any]:
        payload = {"model": self.model, "temperature": 0.0, "top_p": 1.0, **body}
        result = self._request("POST", "/v1/completions", payload)
        choices = result.get("choices") or []
        if len(choices) != 1:
            raise EndpointError(f"/v1/completions returned {len(choices)} choices, expected 1")
        return result

    def count_prompt_tokens(self, prompt: str) -> int:
        """The server's token count for `prompt` (usage.prompt_tokens of a one-token request)."""
        result = self._complete({"prompt": prompt, "max_tokens": 1})
        return int(result["usage"]["prompt_tokens"])

    def greedy(self, prompt: str, *, max_tokens: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Greedy continuation of a text prompt: (prompt token ids, continuation token ids).

        EOS is ignored so every probe scores exactly `max_tokens` positions; the prompt is echoed
        only to learn its token ids, and `score_decode_from` = its length keeps it unscored (cheap).
        """
        n_prompt = self.count_prompt_tokens(prompt)
        result = self._complete(
            {
                "prompt": prompt,
                "max_tokens": max_tokens,
                "ignore_eos": True,
                "echo": True,
                "logprobs": 1,
                "return_tokens_as_token_ids": True,
                "score_decode_from": n_prompt,
            }
        )
        tokens = result["choices"][0].get("logprobs", {}).get("tokens")
        if tokens is None:
            raise EndpointError("/v1/completions with echo and logprobs returned no logprobs.tokens")
        ids = tuple(_token_id(t) for t in tokens)
        if len(ids) != n_prompt + max_tokens:
            raise EndpointError(
                f"echoed {len(ids)} tokens, expected {n_prompt} prompt + {max_tokens} generated "
                "(ignore_eos must keep generation going to max_tokens)"
            )
        return ids[:n_prompt], ids[n_prompt:]

    def teacher_force(
        self, probe_id: str, prompt_ids: Sequence[int], continuation_ids: Sequence[int], *, top_k: int
    ) -> ProbeScores:
        """Score `continuation_ids` after `prompt_ids`, each continuation token through the decode path.

        Raises:
            ProbeMismatch: the server echoed other tokens than it was given.
            EndpointError: the response lacks logprobs where the contract promises them.
        """
        ids = [*prompt_ids, *continuation_ids]
        result = self._complete(
            {
                "prompt": ids,
                "max_tokens": 0,
                "echo": True,
                "logprobs": top_k,
                "return_tokens_as_token_ids": True,
                "score_decode_from": len(prompt_ids),
            }
        )
        logprobs = result["choices"][0].get("logprobs") or {}
        tokens = logprobs.get("tokens") or []
        token_logprobs = logprobs.get("token_logprobs") or []
        top_rows = logprobs.get("top_logprobs") or []
        if not (len(tokens) == len(token_logprobs) == len(top_rows) == len(ids)):
            raise EndpointError(
                f"probe {probe_id}: echo returned {len(tokens)} tokens, {len(token_logprobs)} logprobs and "
                f"{len(top_rows)} top-k rows for {len(ids)} prompt tokens"
            )
        if [_token_id(t) for t in tokens] != ids:
            raise ProbeMismatch(f"probe {probe_id}: the server echoed different token ids than it was sent")
        start = len(prompt_ids)
        scored_lp: list[float] = []
        scored_top: list[TopK] = []
        for j in range(start, len(ids)):
            lp, row = token_logprobs[j], top_rows[j]
            if lp is None or not row:
                raise EndpointError(f"probe {probe_id}: no logprobs at scored position {j - start}")
            scored_lp.append(float(lp))
            scored_top.append({_token_id(t): float(v) for t, v in row.items()})
        return ProbeScores(probe_id=probe_id, token_logprobs=tuple(scored_lp), top=tuple(scored_top))
