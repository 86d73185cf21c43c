"""The CPU engine: a Hugging Face transformers model behind the same contract as exllamav3.

It serves the embedded default and CI. Jobs take turns on the worker thread, one prefill chunk or
one token per turn, so concurrent requests interleave instead of waiting for each other; at most
`max_batch_size` are active, the rest queue. Each job keeps its own KV/recurrent cache.
"""

from __future__ import annotations

import inspect
import json
import logging
import random
import time
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

__all__ = ["TransformersEngine"]

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


class TransformersEngine(Engine):
    name = "transformers"

    def __init__(self, model_dir: Path, args: TransformersArgs, codec: TextCodec):
        super().__init__(model_dir, codec)
        self.args = args
        self._queue: deque[Job] = deque()
        self._active: list[Job] = []
        self.model = None
        self._cache_kwarg = "cache"

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
        req: GenerationRequest = job.request
        state: _State = job.state
        if state.fed < len(req.prompt_ids):
            self._prefill_chunk(state, req.prompt_ids, len(req.prompt_ids))
            return False
        if state.rng is None:
            state.rng = torch.Generator().manual_seed(req.sampling.seed if req.sampling.seed is not None else random.getrandbits(63))
            state.decoder = IncrementalDecoder(self.codec)
            state.stops = StopMatcher(req.stop_strings)
        banned = self.codec.eos_token_ids if req.ignore_eos else ()
        token = choose_token(
            state.logits,
            req.sampling,
            context_ids=[*req.prompt_ids, *state.generated],
            generated_ids=state.generated,
            generator=state.rng,
            banned_ids=banned,
        )
        now = time.perf_counter()
        if state.first_token_at is None:
            state.first_token_at = now
        state.generated.append(token)
        logprob, top = None, ()
        if req.top_logprobs is not None:
            logprobs = torch.log_softmax(state.logits, dim=-1)
            logprob, top = float(logprobs[token]), top_logprobs(logprobs, req.top_logprobs)
        if token in self.codec.eos_token_ids and not req.ignore_eos:
            job.emit(TokenEvent(token, state.stops.flush(), logprob, top))
            job.emit(self._finish(job, "stop"))
            return True
        text = state.stops.push(state.decoder.push(token))
        if state.stops.stopped:
            job.emit(TokenEvent(token, text, logprob, top))
            job.emit(self._finish(job, "stop"))
            return True
        if len(state.generated) >= req.max_new_tokens:
            job.emit(TokenEvent(token, text + state.stops.flush(), logprob, top))
            job.emit(self._finish(job, "length"))
            return True
        job.emit(TokenEvent(token, text, logprob, top))
        self._forward(state, [token])
        return False

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
        return FinishEvent(reason, usage, scores=scores)

    def info(self) -> dict:
        import transformers

        return {
            **super().info(),
            "engine_version": transformers.__version__,
            "torch_version": torch.__version__,
            "dtype": self.args.dtype,
        }
