"""The engine contract: one model, one worker thread, jobs in, token events out.

An engine owns the model and runs every GPU (or CPU) step on its own worker thread, so the HTTP
event loop never blocks on a forward pass and the model is never touched by two threads. Requests
reach the worker through a thread-safe inbox; events come back to the event loop through
`loop.call_soon_threadsafe`. Cancelling the consumer of `generate()` cancels the job in the engine.

Subclasses implement `_load`, `_warmup`, `_admit`, `_step`, `_cancel` and `_has_work`; they may
assume all of them are called on the worker thread only.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import queue
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Literal

from serving.textcodec import TextCodec

__all__ = [
    "Engine",
    "EngineUsage",
    "FinishEvent",
    "GenerationRequest",
    "Job",
    "SamplingParams",
    "ScoreRequest",
    "TokenEvent",
    "TokenScore",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class SamplingParams:
    """Everything that decides which token comes next. temperature 0 means greedy."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass(frozen=True, kw_only=True, slots=True)
class GenerationRequest:
    prompt_ids: tuple[int, ...]
    max_new_tokens: int
    sampling: SamplingParams = SamplingParams()
    stop_strings: tuple[str, ...] = ()
    ignore_eos: bool = False
    top_logprobs: int | None = None  # None: no logprobs; 0: the chosen token's only; n: plus top n


@dataclass(frozen=True, kw_only=True, slots=True)
class ScoreRequest:
    """Teacher forcing: logprobs of prompt tokens [decode_from, len) through the decode path."""

    prompt_ids: tuple[int, ...]
    decode_from: int = 1
    top_logprobs: int = 0


@dataclass(frozen=True, slots=True)
class TokenScore:
    logprob: float | None  # None for tokens that were not scored
    top: tuple[tuple[int, float], ...] = ()  # (token id, logprob), most likely first


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """One sampled token. `text` is what may be shown now (held text comes later, or never)."""

    token_id: int
    text: str
    logprob: float | None = None
    top: tuple[tuple[int, float], ...] = ()


@dataclass(kw_only=True, slots=True)
class EngineUsage:
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    queue_s: float = 0.0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    # Speculative decoding, from the engine's own per-job counters; None when the engine does not draft
    # (so "no drafting" never reads as "0 % acceptance"). Every drafted token is either accepted or
    # rejected, drafts left unverified when the job ended included (exllamav3's convention).
    accepted_draft_tokens: int | None = None
    rejected_draft_tokens: int | None = None

    @property
    def drafted_tokens(self) -> int | None:
        if self.accepted_draft_tokens is None or self.rejected_draft_tokens is None:
            return None
        return self.accepted_draft_tokens + self.rejected_draft_tokens


@dataclass(frozen=True, slots=True)
class FinishEvent:
    reason: Literal["stop", "length", "cancelled"]
    usage: EngineUsage
    scores: tuple[TokenScore, ...] | None = None  # score jobs only
    error: str | None = None  # set when the engine failed this job (e.g. out of memory)


_serials = itertools.count(1)


@dataclass(eq=False)
class Job:
    """A request in flight. Created on the event loop, advanced only on the worker thread."""

    request: GenerationRequest | ScoreRequest
    emit: Callable[[object], None]  # thread-safe: puts an event on the consumer's queue
    serial: int = field(default_factory=lambda: next(_serials))
    enqueued_at: float = field(default_factory=time.perf_counter)
    cancelled: bool = False
    state: object = None  # engine-private


class Engine(ABC):
    """Base of the exllamav3 and transformers engines. See the module docstring for the contract."""

    name: str = "engine"

    def __init__(self, model_dir, codec: TextCodec):
        self.model_dir = model_dir
        self.codec = codec
        self.context_tokens = 0  # set by _load: longest prompt + output the engine can hold
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.ready = threading.Event()
        self.failed: BaseException | None = None
        self.cancelled_total = 0  # jobs cancelled by a client going away; /v1/server_info shows it

    # ---- lifecycle (called from the main thread) ----

    def start(self) -> None:
        """Load and warm up on the worker thread; `ready` is set when requests can be served."""
        self._thread = threading.Thread(target=self._run, name=f"{self.name}-worker", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def info(self) -> dict:
        """Versions, memory and job counts for /v1/server_info; engines add their own keys."""
        return {"engine": self.name, "context_tokens": self.context_tokens,
                "jobs_in_flight": len(self._active_jobs()), "jobs_cancelled": self.cancelled_total}

    # ---- requests (called on the event loop) ----

    async def generate(self, request: GenerationRequest | ScoreRequest) -> AsyncIterator[TokenEvent | FinishEvent]:
        """Stream events of one job; closing the iterator early cancels the job."""
        job, events = self._submit(request)
        finished = False
        try:
            while not finished:
                event = await events.get()
                finished = isinstance(event, FinishEvent)
                yield event
        finally:
            if not finished:
                self.cancel(job)

    async def score(self, request: ScoreRequest) -> FinishEvent:
        """Teacher-force a prompt; cancelled with the awaiting task."""
        async for event in self.generate(request):
            if isinstance(event, FinishEvent):
                return event
        raise RuntimeError("engine closed a score job without a FinishEvent")

    def cancel(self, job: Job) -> None:
        job.cancelled = True
        self._inbox.put(("cancel", job))
        self._wake.set()

    def _submit(self, request) -> tuple[Job, asyncio.Queue]:
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()

        def emit(event) -> None:
            loop.call_soon_threadsafe(events.put_nowait, event)

        job = Job(request=request, emit=emit)
        self._inbox.put(("admit", job))
        self._wake.set()
        if self.failed is not None:  # no worker will ever take it (it may have died just now)
            self._fail_inbox(self.failed)
        return job, events

    # ---- the worker thread ----

    def _run(self) -> None:
        try:
            self._load()
            self._warmup()
        except BaseException as exc:  # reported by /health and the process exit status
            log.exception("engine failed to load")
            self.failed = exc
            self.ready.set()
            return
        self.ready.set()
        log.info("engine %s ready: context %d tokens", self.name, self.context_tokens)
        try:
            self._serve()
        except BaseException as exc:  # the worker is gone: /health says so, every waiting job is told
            log.exception("engine worker died")
            self.failed = exc
            for job in self._active_jobs():
                self._fail_job(job, exc, log_it=False)
            self._fail_inbox(exc)

    def _serve(self) -> None:
        while not self._stopping:
            self._drain_inbox()
            if not self._has_work():
                self._wake.wait(timeout=0.5)
                self._wake.clear()
                continue
            try:
                self._step()
            except Exception as exc:
                self._fail_all(exc)

    def _inbox_items(self):
        """What the event loop has put in the inbox so far, in order, without waiting."""
        while True:
            try:
                yield self._inbox.get_nowait()
            except queue.Empty:
                return

    def _drain_inbox(self) -> None:
        for kind, job in self._inbox_items():
            if kind == "admit":
                if job.cancelled:
                    continue
                try:
                    self._admit(job)
                except Exception as exc:  # this job cannot run (e.g. exllamav3 asserts it is too large)
                    self._fail_job(job, exc)
            else:
                self.cancelled_total += 1
                self._cancel(job)

    def _fail_job(self, job: Job, exc: BaseException, *, log_it: bool = True) -> None:
        """Fail one job with the error and forget it; the others go on."""
        if log_it:
            log.error("job %d failed: %s: %s", job.serial, type(exc).__name__, exc)
        job.emit(FinishEvent("stop", EngineUsage(), error=f"{type(exc).__name__}: {exc}"))
        try:
            self._cancel(job)
        except Exception:  # the engine may hold no state for a job that failed on admission
            log.debug("cancelling failed job %d", job.serial, exc_info=True)

    def _fail_inbox(self, exc: BaseException) -> None:
        for kind, job in self._inbox_items():
            if kind == "admit":
                self._fail_job(job, exc, log_it=False)

    def _fail_all(self, exc: Exception) -> None:
        """A batched step raised and no single job can be blamed: fail those in flight, keep serving."""
        log.exception("engine step failed")
        for job in self._active_jobs():
            self._fail_job(job, exc, log_it=False)

    @abstractmethod
    def _load(self) -> None: ...

    @abstractmethod
    def _warmup(self) -> None: ...

    @abstractmethod
    def _admit(self, job: Job) -> None: ...

    @abstractmethod
    def _cancel(self, job: Job) -> None: ...

    @abstractmethod
    def _step(self) -> None: ...

    @abstractmethod
    def _has_work(self) -> bool: ...

    @abstractmethod
    def _active_jobs(self) -> list[Job]: ...
