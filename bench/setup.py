"""A bench session's set-up, before any point is measured: the served model, the optional request fields the
server accepts, its token scale (from two probes of known length), the check that the ladder fits its
context, the global warm-up, and the prompt opening its chat template caches for every prompt.

`SessionSetUp` is the set-up half of bench.ladder's session, which inherits it (`self` is the session: its
plan, client, prompt source and request sending).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from bench.errors import BenchConfigError
from bench.prompts import TokenScale
from bench.records import ServerProfile
from bench.runs import RequestResult
from openai_client import ProtocolError, ServerRejected, ServerUnreachable

__all__ = ["OPTIONAL_FIELDS", "SessionSetUp"]

log = logging.getLogger("bench.ladder")  # the session's one log, as before the set-up had its own module
_PROBE_TOKENS = 8  # completion length of the capability probe
_SMALL_PROBE_CHARS = 200
OPTIONAL_FIELDS = ("ignore_eos", "stream_options")
# a nonce's first token may match an earlier nonce's by chance: so many tokens past the shared opening
# are not a cache hit (a repeated prompt shares all of its tokens)
_NONCE_MATCH_TOKENS = 4


class SessionSetUp:
    """The session's set-up (a mixin of bench.ladder's session)."""

    def set_up(self) -> None:
        entry = self._pick_model(self.client.models())
        self._model = entry["id"]
        info = self.client.server_info()
        small = self._negotiate()
        large = self._send_probe(self._probe_chars(), max_tokens=1)
        if not large.ok or large.prompt_tokens is None:
            raise ProtocolError(f"the sizing probe failed: {large.error or 'no usage.prompt_tokens'}")
        self._scale = TokenScale.from_probes(
            (small.spec.prompt_chars, small.prompt_tokens or 0),
            (large.spec.prompt_chars, large.prompt_tokens),
        )
        max_len = entry.get("max_model_len") or entry.get("max_context_length") or entry.get("context_length")
        self.profile = ServerProfile(
            url=self.client.endpoint.url,
            model=self._model,
            api=self.plan.api,
            max_model_len=int(max_len) if isinstance(max_len, int | float) else None,
            accepts_ignore_eos=self._fields["ignore_eos"],
            accepts_stream_options=self._fields["stream_options"],
            reports_cached_tokens=small.cached_tokens is not None,
            reports_timings=small.server_prefill_s is not None,
            reports_speculative=small.spec_accepted_tokens is not None,
            server_info=info,
        )
        self._check_fits()
        log.info(
            "server %s model %s: ignore_eos %s, timings %s, cached_tokens %s, %.2f chars/token",
            self.profile.url,
            self._model,
            self.profile.accepts_ignore_eos,
            self.profile.reports_timings,
            self.profile.reports_cached_tokens,
            self._scale.chars_per_token,
        )
        for _ in range(self.plan.warmup_requests):
            # discard: the first requests after load include kernel autotuning and allocator growth
            self._warm_up()
        self._learn_shared_prefix()

    def _learn_shared_prefix(self) -> None:
        """How many tokens the server caches of every prompt, from its reports on unique prompts.

        A chat template opens every prompt the same way (Qwen2.5's with a fixed system prompt), and
        a prefix-caching server reuses that opening: 11-38 tokens on exllamav3, vLLM and llama.cpp
        alike. It is expected, not a cache hit. Bench's set-up prompts are unique from their first
        character after that opening, so what the server caches of them, beyond the first request
        (which found nothing cached on a fresh server), is the opening. The smallest report is taken:
        a nonce may match an earlier one's first token by chance. An "opening" over half of the
        ladder's smallest prompt is no opening (set-up prompts repeated from an earlier run with the
        same salt, say): it is not learned, and runs are judged as if nothing were shared.
        """
        # a workload's prompts carry their own system prompt, so the template opens them differently:
        # the opening is learned from bench's own prompts, and bounds the workload's (fewer shared tokens)
        own = set((self.plan.workload or {}).get("weights", {}))
        reported = [r for r in self.probes if r.ok and r.cached_tokens is not None and r.spec.prompt_kind not in own]
        opening = min((r.cached_tokens for r in reported[1:]), default=0) if reported else None
        smallest = min((*self.plan.prefill_tokens, *self.plan.decode_context_tokens))
        if opening is not None and opening > smallest // 2:
            log.warning(
                "the server reports %d cached tokens on bench's unique set-up prompts, over half of the "
                "ladder's smallest prompt (%d tokens): not taken as a shared opening (set --max-cached-tokens "
                "if the server's template really opens every prompt with that much)", opening, smallest,
            )
            opening = None
        limit = self.plan.max_cached_tokens
        if limit is None:
            limit = (opening or 0) + _NONCE_MATCH_TOKENS
        self.profile = dataclasses.replace(self.profile, shared_prefix_tokens=opening, max_cached_tokens=limit)
        if opening:
            log.info("the server caches the first %d tokens of every prompt (its chat template's opening); "
                     "a run with more than %d cached tokens is a cache hit", opening, limit)

    def _pick_model(self, data: list[dict[str, Any]]) -> dict[str, Any]:
        wanted = self.client.endpoint.model
        if wanted is None:
            return data[0]
        for m in data:
            if m["id"] == wanted:
                return m
        raise BenchConfigError(
            f"--model {wanted!r} is not served here; the server lists {[m['id'] for m in data]}"
        )

    def _negotiate(self) -> RequestResult:
        """Send the first probe with every optional field, dropping the ones the server refuses."""
        while True:
            result = self._send_probe(_SMALL_PROBE_CHARS, max_tokens=_PROBE_TOKENS)
            if result.ok:
                break
            if result.http_status is None:
                raise ServerUnreachable(f"the first request got no answer: {result.error}")
            refused = [
                f
                for f in OPTIONAL_FIELDS
                if self._fields[f] and result.http_status in (400, 422) and f in (result.error or "")
            ]
            if not refused:
                raise ServerRejected(
                    f"the first request failed: {result.error}", status=result.http_status or 0
                )
            for f in refused:
                log.info("server refuses the %s field; measuring without it", f)
                self._fields[f] = False
        if result.prompt_tokens is None or result.completion_tokens is None:
            raise ProtocolError(
                "the server's stream carries no usage (prompt_tokens, completion_tokens); bench needs it to "
                "size prompts and to check output lengths"
            )
        if result.completion_tokens > _PROBE_TOKENS:
            raise ProtocolError(
                f"asked for max_tokens={_PROBE_TOKENS}, got {result.completion_tokens} tokens: the server "
                "ignores max_tokens"
            )
        return result

    def _probe_chars(self) -> int:
        lengths = (*self.plan.prefill_tokens, *self.plan.decode_context_tokens)
        return max(2 * _SMALL_PROBE_CHARS, min(8000, int(min(lengths) * 2.5)))

    def _check_fits(self) -> None:
        limit = self.profile.max_model_len
        if limit is None:
            return
        for target in self.plan.prefill_tokens:
            if target + 1 > limit:
                raise BenchConfigError(
                    f"prefill {target} needs {target + 1} tokens of context but the server's max_model_len is "
                    f"{limit}: lower --prefill or give the server a larger context"
                )
        for target in self.plan.decode_context_tokens:
            if target + self.plan.decode_tokens > limit:
                raise BenchConfigError(
                    f"decode at {target} needs {target + self.plan.decode_tokens} tokens of context but the "
                    f"server's max_model_len is {limit}: lower --decode or --decode-tokens"
                )

    def _send_probe(self, chars: int, *, max_tokens: int) -> RequestResult:
        prompt = self.source.probe(chars, self._next_serial())
        result = self._send("probe", "probe", prompt, None, max_tokens)
        self.probes.append(result)
        return result

    def _warm_up(self) -> None:
        kind = self.plan.decode_kinds[0]
        target = min((*self.plan.decode_context_tokens, *self.plan.prefill_tokens))
        prompt = self.source.decode(kind, self._scale.chars_for(target), self._next_serial())
        max_tokens = self.plan.decode_tokens if self.plan.decode_context_tokens else 1
        result = self._send("warmup", "warmup", prompt, target, max_tokens)
        self._raise_if_down(result, "warm-up")
        self.probes.append(result)
