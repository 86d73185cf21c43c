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

import contextlib
import logging
import re
from collections.abc import Iterator, Sequence
from typing import Any

from eval.errors import EndpointError, ProbeMismatch
from eval.records import ProbeScores, TopK
from openai_client import Client, ClientConfigError, ClientError, Endpoint, ServerRejected

__all__ = ["CompletionsClient"]

log = logging.getLogger(__name__)
_TOKEN_ID = re.compile(r"^token_id:(\d+)$")


@contextlib.contextmanager
def _endpoint_errors() -> Iterator[None]:
    """The client's errors, as the EndpointError fidelity's callers handle (with the HTTP status)."""
    try:
        yield
    except ClientError as exc:
        raise EndpointError(str(exc), status_code=exc.status if isinstance(exc, ServerRejected) else None) from exc


def _token_id(token: str) -> int:
    match = _TOKEN_ID.match(token)
    if match is None:
        raise EndpointError(
            f"logprob token {token!r} is not 'token_id:N': the server ignored return_tokens_as_token_ids, "
            "which fidelity needs for exact token identities"
        )
    return int(match.group(1))


class CompletionsClient:
    """One server under test. Greedy, concurrency 1: fidelity needs a fixed batch shape.

    The transport is the project's one client for OpenAI-compatible servers (`openai_client`); its
    errors become EndpointError here.
    """

    def __init__(self, base_url: str, *, api_key: str | None = None, timeout_s: float = 900.0):
        try:
            endpoint = Endpoint(url=base_url, api_key=api_key)
        except ClientConfigError as exc:
            raise EndpointError(str(exc)) from exc
        self.base_url = endpoint.url  # the server root; paths add /v1
        self._client = Client(endpoint, timeout_s=timeout_s)
        self._model: str | None = None

    def __enter__(self) -> CompletionsClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    @property
    def model(self) -> str:
        """The one served model's id, from /v1/models."""
        if self._model is None:
            with _endpoint_errors():
                self._model = self._client.served_model()
        return self._model

    def server_info(self) -> dict[str, Any] | None:
        """The server's /v1/server_info (engine, versions, config digest), or None for a peer without it."""
        with _endpoint_errors():
            return self._client.server_info()

    def _complete(self, body: dict[str, Any]) -> dict[str, Any]:
        payload = {"model": self.model, "temperature": 0.0, "top_p": 1.0, **body}
        with _endpoint_errors():
            result = self._client.post_json("/v1/completions", payload)
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
