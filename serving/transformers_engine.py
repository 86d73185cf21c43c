"""The CPU engine: a Hugging Face transformers model behind the same contract as exllamav3.

It serves the embedded default and CI. Jobs take turns on the worker thread, one prefill chunk or
one decode forward per turn, so concurrent requests interleave instead of waiting for each other;
at most `max_batch_size` are active, the rest queue. Each job keeps its own KV/recurrent cache.

With `draft_mode="ngram"` a decode forward also verifies drafted tokens (prompt lookup: the
continuation of the longest earlier match of the context's suffix, as exllamav3's n-gram mode),
accepted while the job's own sampler picks them, so output keeps its distribution. transformers'
own `generate(prompt_lookup_num_tokens=...)` is not used: it runs a whole request at once (no
interleaving), reports no acceptance counts, and refuses hybrid models, whose recurrent state
cannot be cropped. Here a rejected draft restores the linear-attention layers' state saved before
the verify forward and feeds the accepted tokens again; attention layers are cropped.
"""

from __future__ import annotations

import inspect
import json
import logging
import random
import time
from array import array
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import torch

from serving.config import TransformersArgs
from serving.engine import (
    Engine,
    EngineUsage,
    FinishEvent,
    GenerationRequest,
    Job,
    ScoreRequest,
    TokenEvent,
    TokenScore,
)
from serving.sampling import choose_token, top_logprobs
from serving.stops import StopMatcher
from serving.textcodec import IncrementalDecoder, TextCodec

__all__ = ["TransformersEngine", "ngram_draft"]

log = logging.getLogger(__name__)


@dataclass
class _State:
    """Per-job progress. `fed` counts prompt/forced tokens already run through the model."""

    cache: object
    started_at: float
    fed: int = 0
    logits: torch.Tensor | None = None  # [vocab] for the next position
    generated: list[int] = field(default_factory=list)
    first_token_at: float | None = None
    decoder: IncrementalDecoder | None = None
    stops: StopMatcher | None = None
    rng: torch.Generator | None = None
    scores: list[TokenScore] = field(default_factory=list)
    pending: int | None = None  # chosen and emitted, not yet fed to the model
    accepted_draft_tokens: int = 0
    rejected_draft_tokens: int = 0


class TransformersEngine(Engine):
    name = "transformers"

    def __init__(self, model_dir: Path, args: TransformersArgs, codec: TextCodec):
        super().__init__(model_dir, codec)
        self.args = args
        self._queue: deque[Job] = deque()
        self._active: list[Job] = []
        self.model = None
        self._cache_kwarg = "cache"
        self._recurrent = False  # the model has linear-attention layers (set by _load)

    # ---- worker thread ----

    def _load(self) -> None:
        from transformers import AutoModelForCausalLM

        if self.args.threads:
            torch.set_num_threads(self.args.threads)
        dtype = getattr(torch, self.args.dtype)
        self.model = AutoModelForCausalLM.from_pretrained(
            self.model_dir, dtype=dtype, attn_implementation=self.args.attn_implementation
        ).eval()
        params = inspect.signature(self.model.forward).parameters
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values"
        self._recurrent = any(hasattr(layer, "recurrent_states") for layer in self._new_state().cache.layers)
        config = json.loads((Path(self.model_dir) / "config.json").read_text())
        limit = config.get("max_position_embeddings") or config.get("text_config", {}).get("max_position_embeddings")
        self.context_tokens = self.args.context_tokens or int(limit or 4096)

    def _warmup(self) -> None:
        ids = self.codec.encode("Warm-up: what is 2 + 3?")
        state = self._new_state()
        with torch.inference_mode():
            self._forward(state, ids)
            for _ in range(2):
                self._forward(state, [int(torch.argmax(state.logits))])

    def _admit(self, job: Job) -> None:
        self._queue.append(job)

    def _cancel(self, job: Job) -> None:
        if job in self._active:
            self._active.remove(job)
        elif job in self._queue:
            self._queue.remove(job)

    def _has_work(self) -> bool:
        return bool(self._active or self._queue)

    def _active_jobs(self) -> list[Job]:
        return list(self._active) + list(self._queue)

    def _step(self) -> None:
        while self._queue and len(self._active) < self.args.max_batch_size:
            job = self._queue.popleft()
            job.state = self._new_state()
            self._active.append(job)
        with torch.inference_mode():
            for job in list(self._active):
                try:  # jobs advance one at a time here, so a failure is this job's alone
                    done = self._advance_score(job) if isinstance(job.request, ScoreRequest) else \
                        self._advance_generation(job)
                except Exception as exc:
                    self._fail_job(job, exc)
                    continue
                if done:
                    self._active.remove(job)

    # ---- one turn of a job ----

    def _new_state(self) -> _State:
        from transformers import DynamicCache

        return _State(cache=DynamicCache(config=self.model.config), started_at=time.perf_counter())

    def _forward(self, state: _State, ids: list[int]) -> torch.Tensor:
        """Run `ids` after what the cache holds; keep the last position's logits. Returns all logits."""
        out = self.model(
            input_ids=torch.tensor([ids], dtype=torch.long),
            use_cache=True,
            **{self._cache_kwarg: state.cache},
        )
        logits = out.logits[0].float()
        state.logits = logits[-1]
        state.fed += len(ids)
        return logits

    def _prefill_chunk(self, state: _State, prompt: tuple[int, ...], end: int) -> None:
        chunk = self.args.prefill_chunk_size or (end - state.fed)
        self._forward(state, list(prompt[state.fed : min(end, state.fed + chunk)]))

    def _advance_generation(self, job: Job) -> bool:
        """One turn: prefill a chunk, or feed the last token (plus drafts) and emit what the model chose."""
        req: GenerationRequest = job.request
        state: _State = job.state
        if state.fed < len(req.prompt_ids):
            self._prefill_chunk(state, req.prompt_ids, len(req.prompt_ids))
            return False
        if state.rng is None:
            state.rng = torch.Generator().manual_seed(req.sampling.seed if req.sampling.seed is not None else random.getrandbits(63))
            state.decoder = IncrementalDecoder(self.codec)
            state.stops = StopMatcher(req.stop_strings)
        if state.pending is None:  # the first token comes from the prefill's last logits
            token = self._choose(job, state.logits)
            reason = self._emit(job, token, state.logits)
            if reason is not None:
                job.emit(self._finish(job, reason))
                return True
            state.pending = token
        return self._decode_step(job)

    def _decode_step(self, job: Job) -> bool:
        """Feed the pending token and any drafts in one forward; accept drafts while the sampler agrees.

        The token chosen at each position is what plain decoding would have chosen there, so a draft
        is accepted exactly when it equals it (exllamav3's rule), and the first disagreement is
        emitted as the correction. Drafts still unverified when the job ends count as rejected, so
        accepted + rejected is the number drafted.
        """
        req: GenerationRequest = job.request
        state: _State = job.state
        remaining = req.max_new_tokens - len(state.generated)
        drafts = self._drafts([*req.prompt_ids, *state.generated], limit=remaining - 1)
        fed_before = state.fed
        saved = self._save_recurrent(state.cache) if drafts and self._recurrent else None
        fed = [state.pending, *drafts]
        logits = self._forward(state, fed)[-len(fed):]  # [1 + drafts, vocab]
        for i in range(len(fed)):
            token = self._choose(job, logits[i])
            matched = i < len(drafts) and token == drafts[i]
            if matched:
                state.accepted_draft_tokens += 1
            elif i < len(drafts):
                state.rejected_draft_tokens += len(drafts) - i
            reason = self._emit(job, token, logits[i])
            if reason is not None:
                if matched:
                    state.rejected_draft_tokens += len(drafts) - i - 1  # verified by nobody: the job ended
                job.emit(self._finish(job, reason))
                return True
            if not matched:
                if i < len(drafts):
                    self._rewind(state, fed_before, fed[: i + 1], saved)
                state.pending = token
                return False
        raise AssertionError("the last position is never a draft")  # internal invariant

    def _choose(self, job: Job, logits: torch.Tensor) -> int:
        req: GenerationRequest = job.request
        state: _State = job.state
        return choose_token(
            logits,
            req.sampling,
            context_ids=[*req.prompt_ids, *state.generated],
            generated_ids=state.generated,
            generator=state.rng,
            banned_ids=self.codec.eos_token_ids if req.ignore_eos else (),
        )

    def _emit(self, job: Job, token: int, logits: torch.Tensor) -> str | None:
        """Emit one chosen token; return the finish reason when it ends the job (the caller finishes it)."""
        req: GenerationRequest = job.request
        state: _State = job.state
        if state.first_token_at is None:
            state.first_token_at = time.perf_counter()
        state.generated.append(token)
        logprob, top = None, ()
        if req.top_logprobs is not None:
            logprobs = torch.log_softmax(logits, dim=-1)
            logprob, top = float(logprobs[token]), top_logprobs(logprobs, req.top_logprobs)
        if token in self.codec.eos_token_ids and not req.ignore_eos:
            job.emit(TokenEvent(token, state.stops.flush(), logprob, top))
            return "stop"
        text = state.stops.push(state.decoder.push(token))
        if state.stops.stopped:
            job.emit(TokenEvent(token, text, logprob, top))
            return "stop"
        if len(state.generated) >= req.max_new_tokens:
            job.emit(TokenEvent(token, text + state.stops.flush(), logprob, top))
            return "length"
        job.emit(TokenEvent(token, text, logprob, top))
        return None

    # ---- prompt-lookup drafting ----

    def _drafts(self, context: list[int], *, limit: int) -> list[int]:
        """The tokens after the latest earlier occurrence of the context's longest matching suffix."""
        k = min(self.args.draft_tokens, limit)
        if k <= 0:
            return []
        return ngram_draft(context, match_min=self.args.ngram_match_min, length=k)

    @staticmethod
    def _save_recurrent(cache) -> list:
        """Copies of every linear-attention layer's conv and recurrent state (they cannot be cropped)."""
        return [
            ({i: t.clone() for i, t in layer.conv_states.items() if t is not None},
             {i: t.clone() for i, t in layer.recurrent_states.items() if t is not None})
            if hasattr(layer, "recurrent_states") else None
            for layer in cache.layers
        ]

    def _rewind(self, state: _State, fed_before: int, keep: list[int], saved: list | None) -> None:
        """Drop the rejected drafts from the cache: it then holds exactly `fed_before` + `keep` tokens."""
        fed_now = state.fed
        if saved is None:  # attention layers only: cropping is exact
            state.cache.crop(-(fed_now - fed_before - len(keep)))
            state.fed = fed_before + len(keep)
            return
        for layer, copies in zip(state.cache.layers, saved, strict=True):
            if copies is None:
                layer.crop(-(fed_now - fed_before))
            else:
                layer.conv_states.update(copies[0])
                layer.recurrent_states.update(copies[1])
        state.fed = fed_before
        self._forward(state, keep)  # the recurrent state advances over the accepted tokens only

    def _advance_score(self, job: Job) -> bool:
        req: ScoreRequest = job.request
        state: _State = job.state
        prompt = req.prompt_ids
        prefill_end = min(max(req.decode_from - 1, 0), len(prompt) - 1)
        if state.fed < prefill_end:
            self._prefill_chunk(state, prompt, prefill_end)
            return False
        if not state.scores:
            state.scores = [TokenScore(None)] * min(req.decode_from, len(prompt))
        if state.fed > 0 and state.fed < len(prompt) and len(state.scores) == state.fed:
            logprobs = torch.log_softmax(state.logits, dim=-1)
            token = prompt[state.fed]
            state.scores.append(TokenScore(float(logprobs[token]), top_logprobs(logprobs, req.top_logprobs)))
            if state.first_token_at is None:
                state.first_token_at = time.perf_counter()
        if state.fed >= len(prompt) - 1 and len(state.scores) >= len(prompt):
            job.emit(self._finish(job, "stop", scores=tuple(state.scores[: len(prompt)])))
            return True
        self._forward(state, [prompt[state.fed]])  # decode-shaped: one token after the cache
        return False

    def _finish(self, job: Job, reason: str, scores=None) -> FinishEvent:
        state: _State = job.state
        now = time.perf_counter()
        first = state.first_token_at or now
        prompt_len = len(job.request.prompt_ids)
        usage = EngineUsage(
            prompt_tokens=prompt_len,
            cached_tokens=0,  # no prefix cache in this engine
            completion_tokens=len(state.generated),
            queue_s=state.started_at - job.enqueued_at,
            prefill_s=first - state.started_at,
            decode_s=now - first,
        )
        if self.args.draft_mode != "none" and not isinstance(job.request, ScoreRequest):
            usage.accepted_draft_tokens = state.accepted_draft_tokens
            usage.rejected_draft_tokens = state.rejected_draft_tokens
        return FinishEvent(reason, usage, scores=scores)

    def info(self) -> dict:
        import transformers

        return {
            **super().info(),
            "engine_version": transformers.__version__,
            "torch_version": torch.__version__,
            "dtype": self.args.dtype,
        }


def ngram_draft(context: list[int], *, match_min: int, length: int, match_max: int = 64) -> list[int]:
    """Up to `length` tokens that followed the latest earlier occurrence of the longest suffix of `context`
    (at least `match_min` and at most `match_max` tokens long) that occurred before; [] without one."""
    if len(context) <= match_min:
        return []
    ids = array("i", context)
    haystack = ids[:-1].tobytes()  # an occurrence must end before the last token, so something follows it
    best = None
    n = match_min
    while n <= min(match_max, len(context) - 1):
        at = _rfind_aligned(haystack, ids[-n:].tobytes())
        if at is None:
            break
        best, n = (at, n), n + 1
    if best is None:
        return []
    start = best[0] + best[1]
    return context[start : start + length]


def _rfind_aligned(haystack: bytes, needle: bytes) -> int | None:
    """Token index of the last occurrence of `needle` in `haystack`, both int32 token arrays."""
    end = len(haystack)
    while True:
        pos = haystack.rfind(needle, 0, end)
        if pos < 0:
            return None
        if pos % 4 == 0:
            return pos // 4
        end = pos + len(needle) - 1  # a match straddling token boundaries: look further left
