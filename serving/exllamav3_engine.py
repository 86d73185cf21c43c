"""The product engine: exllamav3's Generator driven from one worker thread.

Every keyword passed to exllamav3 is checked against the installed signatures first (it silently
ignores unknown ones). Jobs map one to one onto exllamav3 Jobs, so its scheduler does the batching,
prefix caching and speculative decoding, and its own per-job counters become the usage we report.
Teacher forcing (the fidelity gate's prompt scoring) runs through the same Generator: the prefix
is prefilled and the rest is injected with `constrain_output_now`, one token per decode step, so
decode-only kernels (int8 GEMV, graphed attention) and the quantized KV cache are exercised.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path

from serving.config import DRAFT_CHECKPOINT_MODES, Exl3Args
from serving.drafter import check_draft_tokens, check_same_vocabulary, read_drafter
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
from serving.errors import ConfigError
from serving.exl3_surface import installed_surface
from serving.textcodec import TextCodec

__all__ = ["Exl3Engine"]

log = logging.getLogger(__name__)
_FINISH = {"stop_token": "stop", "stop_string": "stop", "max_new_tokens": "length", "end_filter": "stop",
           "loop_detected": "stop"}


class Exl3Engine(Engine):
    name = "exllamav3"

    def __init__(self, model_dir: Path, args: Exl3Args, codec: TextCodec, *, env: dict[str, str],
                 vram_limit_bytes: int | None = None):
        super().__init__(model_dir, codec)
        self.args = args
        self.env = env
        self.vram_limit_bytes = vram_limit_bytes
        self._jobs: dict[int, Job] = {}  # our serial -> job
        self._exl3_jobs: dict[int, object] = {}  # our serial -> exllamav3 Job
        self._scores: dict[int, list[TokenScore]] = {}

    # ---- the keywords we pass, in one place, so they can be checked before loading ----

    def _cache_kwargs(self) -> dict:
        a = self.args
        kw = {"max_num_tokens": a.cache_tokens, "max_batch_size": a.cache_slots, "max_history": a.max_history}
        if a.cache_kind == "quant":
            kw.update(k_bits=a.cache_k_bits, v_bits=a.cache_v_bits)
        return kw

    def _generator_kwargs(self) -> dict:
        a = self.args
        kw = {
            "max_batch_size": a.max_batch_size,
            "max_chunk_size": a.max_chunk_size,
            "shared_chunk_size": a.shared_chunk_size,
            "prefill_cooldown": a.prefill_cooldown,
            "recurrent_cache_size": a.recurrent_cache_size,
            "recurrent_checkpoint_interval": a.recurrent_checkpoint_interval,
            "recurrent_checkpoint_interval_pp": a.recurrent_checkpoint_interval_pp,
            "hybrid_draft_tokens": a.hybrid_draft_tokens,
        }
        if a.draft_mode == "ngram":
            kw["ngram_match_min"] = a.ngram_match_min
        if a.draft_mode != "none":
            kw.update(num_draft_tokens=a.num_draft_tokens, dynamic_draft_tokens=a.dynamic_draft_tokens,
                      draft_confidence=a.draft_confidence)
        if a.draft_mode in ("mtp", "dflash"):
            kw["sparse_draft_head"] = a.sparse_draft_head
        return kw

    def check_drafter(self) -> None:
        """Raise ConfigError unless the draft checkpoint is of the kind draft_mode says and shares our vocabulary."""
        a = self.args
        if a.draft_mode not in DRAFT_CHECKPOINT_MODES:
            return
        drafter = read_drafter(Path(a.draft_model_dir))
        if drafter.draft_mode != a.draft_mode:
            raise ConfigError(f"draft_mode {a.draft_mode!r}, but {a.draft_model_dir} is a {drafter.architecture} "
                              f"checkpoint, which exllamav3 drafts with as draft_mode {drafter.draft_mode!r}")
        check_same_vocabulary(self.model_dir, drafter)
        check_draft_tokens(drafter, a.num_draft_tokens)

    def check_surface(self) -> None:
        """Raise SurfaceMismatch unless the installed exllamav3 takes every keyword and variable we pass."""
        surface = installed_surface()
        surface.require("Cache", [k for k in self._cache_kwargs() if k not in ("k_bits", "v_bits")] +
                        ["layer_type", "recurrent_dtype"])
        if self.args.cache_kind == "quant":
            surface.require("CacheLayer_quant", ["k_bits", "v_bits"])
        surface.require("Generator", list(self._generator_kwargs()) + ["draft_model", "draft_cache"])
        surface.require("Model.load", ["device", "max_chunk_size", "draft_model"])
        if self.args.draft_mode == "mtp":
            surface.require("Model.from_config", ["component"])
        surface.require("Model.warmup", ["cache", "max_chunk_size"])
        surface.require("Job", ["input_ids", "max_new_tokens", "sampler", "seed", "stop_conditions",
                                "return_top_tokens", "return_probs", "identifier"])
        surface.require_env(self.env)

    # ---- worker thread ----

    def _load(self) -> None:
        import torch
        from exllamav3 import Cache, Config, Generator, Model, Tokenizer
        from exllamav3 import Job as Exl3Job
        from exllamav3.cache import CacheLayer_fp16, CacheLayer_quant
        from exllamav3.generator.sampler import ArgmaxSampler, ComboSampler

        # bound once here, so admitting a job imports nothing (and tests can stand in for them)
        self._job_class, self._argmax, self._combo = Exl3Job, ArgmaxSampler, ComboSampler

        if not torch.cuda.is_available():
            raise ConfigError("the exllamav3 engine needs a CUDA GPU; use the transformers engine on CPU")
        if self.vram_limit_bytes:
            total = torch.cuda.get_device_properties(0).total_memory
            torch.cuda.set_per_process_memory_fraction(min(1.0, self.vram_limit_bytes / total), 0)
        a = self.args
        start = time.perf_counter()
        config = Config.from_directory(str(self.model_dir))
        self.model = Model.from_config(config)
        layer_type = CacheLayer_quant if a.cache_kind == "quant" else CacheLayer_fp16
        recurrent_dtype = torch.float if a.recurrent_dtype == "float" else torch.half
        self.cache = Cache(self.model, layer_type=layer_type, recurrent_dtype=recurrent_dtype, **self._cache_kwargs())
        self.draft_model = self.draft_cache = None
        if a.draft_mode == "mtp":
            if "mtp" not in config.model_classes:
                raise ConfigError(f"draft_mode 'mtp' needs MTP weights; {self.model_dir} has none")
            self.draft_model = Model.from_config(config, component="mtp")
        elif a.draft_mode in DRAFT_CHECKPOINT_MODES:  # DFlash drafter or a small causal LM (checked by check_drafter)
            self.draft_model = Model.from_config(Config.from_directory(a.draft_model_dir))
        if self.draft_model is not None:
            # same token capacity as the target's (the Generator asserts it); fp16, as TabbyAPI's default;
            # max_history covers the drafted tokens of a recurrent (hybrid) autoregressive drafter
            self.draft_cache = Cache(self.draft_model, max_num_tokens=a.cache_tokens, max_batch_size=a.cache_slots,
                                     max_history=a.max_history)
            self.draft_model.load(device="cuda:0", max_chunk_size=a.max_chunk_size)
        self.model.load(device="cuda:0", max_chunk_size=a.max_chunk_size, draft_model=self.draft_model)
        self.tokenizer = Tokenizer.from_config(config)
        self.context_tokens = min(a.cache_tokens, int(getattr(config, "max_position_embeddings", 0) or a.cache_tokens))
        # Pays Triton JIT, GEMM autotune and graph workspaces now, not on the first user's request.
        self.model.warmup(cache=self.cache, max_chunk_size=a.max_chunk_size)
        self.generator = Generator(model=self.model, cache=self.cache, tokenizer=self.tokenizer,
                                   draft_model=self.draft_model, draft_cache=self.draft_cache,
                                   **self._generator_kwargs())
        log.info("exllamav3 model loaded in %.1f s", time.perf_counter() - start)

    def _warmup(self) -> None:
        """Real jobs through the Generator: a full prefill chunk and a short decode, greedy and sampled."""
        import torch
        from exllamav3 import Job as Exl3Job
        from exllamav3.generator.sampler import ArgmaxSampler

        filler = self.codec.encode("The quick brown fox jumps over the lazy dog. " * 8)
        n = min(self.args.max_chunk_size + 64, self.context_tokens - 64)
        ids = (filler * (n // len(filler) + 1))[:n]
        for length in (n, 32):
            job = Exl3Job(input_ids=torch.tensor([ids[:length]]), max_new_tokens=32, sampler=ArgmaxSampler(),
                          stop_conditions=[], identifier=-1)
            self.generator.enqueue(job)
            while self.generator.num_remaining_jobs():
                self.generator.iterate()
        torch.cuda.synchronize()

    def _has_work(self) -> bool:
        return self.generator.num_remaining_jobs() > 0

    def _active_jobs(self) -> list[Job]:
        return list(self._jobs.values())

    def _admit(self, job: Job) -> None:
        import torch

        Exl3Job = self._job_class
        req = job.request
        if isinstance(req, ScoreRequest):
            prefix = req.prompt_ids[: req.decode_from]
            forced = req.prompt_ids[req.decode_from:]
            self._scores[job.serial] = [TokenScore(None)] * len(prefix)
            if not forced:
                job.emit(FinishEvent("stop", EngineUsage(prompt_tokens=len(prefix)), scores=tuple(self._scores.pop(job.serial))))
                return
            exl3_job = Exl3Job(input_ids=torch.tensor([prefix]), max_new_tokens=len(forced), sampler=self._argmax(),
                               stop_conditions=[], return_top_tokens=req.top_logprobs, return_probs=True,
                               identifier=job.serial)
            self.generator.enqueue(exl3_job)
            exl3_job.constrain_output_now(torch.tensor([forced], dtype=torch.long))
        else:
            stops = [] if req.ignore_eos else list(self.codec.eos_token_ids)
            exl3_job = Exl3Job(
                input_ids=torch.tensor([req.prompt_ids]),
                max_new_tokens=req.max_new_tokens,
                sampler=self._sampler(req),
                seed=req.sampling.seed,
                stop_conditions=stops + list(req.stop_strings),
                return_top_tokens=req.top_logprobs or 0,
                return_probs=req.top_logprobs is not None,
                identifier=job.serial,
            )
            self.generator.enqueue(exl3_job)
        self._jobs[job.serial] = job
        self._exl3_jobs[job.serial] = exl3_job

    def _sampler(self, req: GenerationRequest):
        s = req.sampling
        plain = s.repetition_penalty == 1.0 and not s.presence_penalty and not s.frequency_penalty
        if s.is_greedy and plain:
            return self._argmax()
        return self._combo(rep_p=s.repetition_penalty, pres_p=s.presence_penalty, freq_p=s.frequency_penalty,
                            temperature=s.temperature, min_p=s.min_p, top_k=s.top_k, top_p=s.top_p)

    def _cancel(self, job: Job) -> None:
        exl3_job = self._exl3_jobs.pop(job.serial, None)
        self._jobs.pop(job.serial, None)
        self._scores.pop(job.serial, None)
        if exl3_job is not None:
            self.generator.cancel(exl3_job)

    def _step(self) -> None:
        for result in self.generator.iterate():
            serial = result.get("identifier")
            job = self._jobs.get(serial)
            if job is None or result.get("stage") != "streaming":
                continue
            if isinstance(job.request, ScoreRequest):
                self._collect_scores(job, result)
            else:
                self._emit_tokens(job, result)
            if result.get("eos"):
                self._finish(job, result)

    def _emit_tokens(self, job: Job, result: dict, *, part: dict | None = None) -> None:
        part = result if part is None else part
        ids = part.get("token_ids")
        text = part.get("text", "")
        if ids is None:
            if text:
                job.emit(TokenEvent(-1, text))  # text released without a new token (held characters)
            return
        ids = ids.view(-1).tolist()
        probs = part.get("token_probs")
        probs = probs.view(-1).tolist() if probs is not None else [None] * len(ids)
        k_tokens, k_probs = part.get("top_k_tokens"), part.get("top_k_probs")
        for i, (token, prob) in enumerate(zip(ids, probs, strict=True)):
            top = ()
            if k_tokens is not None:
                top = tuple((int(t), _log(p)) for t, p in zip(k_tokens.view(len(ids), -1)[i].tolist(),
                                                               k_probs.view(len(ids), -1)[i].tolist(), strict=True))
            job.emit(TokenEvent(token, text if i == len(ids) - 1 else "", _log(prob) if prob is not None else None, top))

    def _collect_scores(self, job: Job, result: dict) -> None:
        ids = result.get("token_ids")
        if ids is None:
            return
        n = ids.numel()
        probs = result["token_probs"].view(-1).tolist()
        k_tokens, k_probs = result.get("top_k_tokens"), result.get("top_k_probs")
        scores = self._scores[job.serial]
        for i in range(n):
            top = ()
            if k_tokens is not None:
                top = tuple((int(t), _log(p)) for t, p in zip(k_tokens.view(n, -1)[i].tolist(),
                                                               k_probs.view(n, -1)[i].tolist(), strict=True))
            scores.append(TokenScore(_log(probs[i]), top))

    def _finish(self, job: Job, result: dict) -> None:
        held = result.get("held") or {}
        if not isinstance(job.request, ScoreRequest):
            if result.get("eos_reason") == "stop_token" and held:
                self._emit_tokens(job, result, part=held)  # text held for a possible stop string is real output
        elif held.get("token_ids") is not None:
            self._collect_scores(job, held)
        usage = EngineUsage(
            prompt_tokens=int(result.get("prompt_tokens", 0)),
            cached_tokens=int(result.get("cached_tokens", 0)),
            completion_tokens=int(result.get("new_tokens", 0)),
            queue_s=float(result.get("time_enqueued", 0.0)),
            prefill_s=float(result.get("time_prefill", 0.0)),
            decode_s=float(result.get("time_generate", 0.0)),
            # exllamav3 puts the counters in the EOS result only when its Generator drafts (job.py)
            accepted_draft_tokens=_count(result, "accepted_draft_tokens"),
            rejected_draft_tokens=_count(result, "rejected_draft_tokens"),
        )
        scores = None
        if isinstance(job.request, ScoreRequest):
            usage.prompt_tokens = len(job.request.prompt_ids)
            usage.completion_tokens = 0
            scores = tuple(self._scores.get(job.serial, ()))
        reason = _FINISH.get(result.get("eos_reason"), "stop")
        self._jobs.pop(job.serial, None)
        self._exl3_jobs.pop(job.serial, None)
        self._scores.pop(job.serial, None)
        job.emit(FinishEvent(reason, usage, scores=scores))

    def info(self) -> dict:
        import exllamav3
        import torch

        props = torch.cuda.get_device_properties(0)
        return {
            **super().info(),
            "engine_version": getattr(exllamav3, "__version__", None) or _dist_version("exllamav3"),
            "torch_version": torch.__version__,
            "cuda_version": torch.version.cuda,
            "gpu_name": props.name,
            "gpu_total_bytes": props.total_memory,
            "vram_limit_bytes": self.vram_limit_bytes,
            "vram_allocated_bytes": torch.cuda.memory_allocated(0),
            "vram_peak_bytes": torch.cuda.max_memory_allocated(0),
            "vram_reserved_bytes": torch.cuda.memory_reserved(0),
            "env": dict(self.env),
        }


def _count(result: dict, key: str) -> int | None:
    value = result.get(key)
    return None if value is None else int(value)


def _log(p: float) -> float:
    return math.log(p) if p > 0.0 else -1e4  # underflow: far below anything a top-k cut would keep


def _dist_version(name: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None
