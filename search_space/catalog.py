"""The knob catalogs: exllamav3 1.6.5's serving knobs, and the CPU reference engine's.

Defaults are exllamav3's own, read from its source (file:line in each note), so the all-defaults
configuration is stock exllamav3 and the baseline. Where exllamav3 has no default (the cache size,
the quantized cache's bits, the n-gram match length) the note says whose default it is. Order
matters: a knob comes after every knob its conditions read.

Usage:
    for knob in EXL3_KNOBS: print(knob.name, knob.domain.describe(), knob.default)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from search_space.domains import USE_DEFAULT, Categorical, Domain, FloatRange, IntRange
from search_space.knobs import EnvVar, ExlArg, Knob, SpaceContext, TransformersArg, When, knob_is, on_context
from serving.config import PAGE_TOKENS

__all__ = ["EXL3_KNOBS", "TRANSFORMERS_KNOBS", "catalog_for"]

GiB = 1024**3

HYBRID = on_context("the model has Gated DeltaNet (linear-attention) layers", lambda c: c.model.is_hybrid)
EXL3_WEIGHTS = on_context("the checkpoint is EXL3-quantized", lambda c: c.model.is_exl3)
MUL1_WEIGHTS = on_context("the checkpoint is EXL3 with the mul1 codebook", lambda c: c.model.has_mul1_codebook)
HAS_ATTENTION = on_context("the model has attention layers", lambda c: c.model.num_attention_layers > 0)
HAS_MTP = on_context("the checkpoint has MTP weights and the installed exllamav3 registers an MTP component "
                     "for its architecture", lambda c: c.has_mtp_component)
HAS_DFLASH = on_context("the user gave a draft checkpoint that the installed exllamav3 classes as a DFlash drafter",
                        lambda c: c.draft_kind == "dflash")
HAS_CAUSAL_DRAFT = on_context("the user gave a draft checkpoint that the installed exllamav3 loads as an ordinary "
                              "causal LM of the model's vocabulary", lambda c: c.draft_kind == "draft_model")
QUANT_CACHE = knob_is("cache_kind", "quant")
SPECULATIVE = knob_is("draft_mode", "ngram", "mtp", "dflash", "draft_model")
DRAFT_MODEL = knob_is("draft_mode", "mtp", "dflash", "draft_model")  # a drafter network (not n-gram)
BORROWED_HEAD = knob_is("draft_mode", "mtp", "dflash")  # drafters that use the target's lm_head


def _fits_context(tokens: int) -> When:
    return on_context(
        f"the model's context is at least {tokens} tokens",
        lambda c: (c.model.max_position_embeddings or tokens) >= tokens,
    )


def _shared_chunk_tokens(fraction: Any, values: Mapping[str, Any]) -> int | None:
    """A fraction of max_chunk_size, rounded up to the page; USE_DEFAULT lets exllamav3 take half."""
    if fraction is USE_DEFAULT:
        return None
    pages = math.ceil(values["max_chunk_size"] * fraction / PAGE_TOKENS)
    return max(1, pages) * PAGE_TOKENS


def _drafters_default(context: SpaceContext, values: Mapping[str, Any]) -> int:
    """What exllamav3's Generator drafts per step when num_draft_tokens is None (generator.py:265-275)."""
    draft = context.draft_model
    if values.get("draft_mode") == "dflash" and draft is not None and draft.dflash_block_size:
        return min(16, draft.dflash_block_size - 1)
    return 4  # n-gram's default, Qwen3.5 MTP's default_draft_size, and an autoregressive drafter's (no caps)


def _draft_tokens_for(domain: Domain, context: SpaceContext) -> Domain:
    """With a DFlash drafter, at most its block size - 1: its one pass drafts that many, and exllamav3 copies
    num_draft_tokens columns of them (generator.py iterate_draftmodel_dflash_gen), so more fails the round.
    The bound holds for every mode of that study (one distribution per parameter)."""
    draft = context.draft_model
    if not (isinstance(domain, IntRange) and draft is not None and draft.dflash_block_size):
        return domain
    return IntRange(domain.low, max(domain.low, min(domain.high, draft.dflash_block_size - 1)))


def _gen(field: str, *extra: tuple[str, str]) -> ExlArg:
    return ExlArg(field, (("Generator", field), *extra))


def _switch(name: str, default: int, *, when: tuple[When, ...] = (), lossy: bool, note: str) -> Knob:
    """An on/off EXL3_* variable (exllamav3 tests `!= "0"`)."""
    return Knob(name=name, domain=Categorical((0, 1)), default=default, applied_as=EnvVar(name, str(default)),
                applies_when=when, may_change_outputs=lossy, note=note)


_CACHE_TOKENS = (8192, 16384, 32768, 65536, 131072, 262144)

EXL3_KNOBS: tuple[Knob, ...] = (
    # --- Cache (cache/cache.py:93, cache/quant.py:13) -------------------------------------------
    Knob(name="cache_tokens", domain=Categorical(_CACHE_TOKENS), default=32768,
         applied_as=ExlArg("cache_tokens", (("Cache", "max_num_tokens"),)), may_change_outputs=False,
         choice_requires=tuple((t, _fits_context(t)) for t in _CACHE_TOKENS if t != 32768),
         note="shared KV capacity; exllamav3 has no default (Cache requires it), 32768 is Exl3Args'. "
              "Capacity, not speed: pin it to the workload's longest context"),
    Knob(name="cache_kind", domain=Categorical(("fp16", "quant")), default="fp16",
         applied_as=ExlArg("cache_kind", (("Cache", "layer_type"),)), applies_when=(HAS_ATTENTION,),
         may_change_outputs=True, note="CacheLayer_fp16 (default) or CacheLayer_quant"),
    Knob(name="cache_k_bits", domain=IntRange(2, 8), default=8,
         applied_as=ExlArg("cache_k_bits", (("CacheLayer_quant", "k_bits"),)), applies_when=(QUANT_CACHE,),
         may_change_outputs=True, note="2..8 (cache/quant.py:30); no exllamav3 default; keys are more sensitive"),
    Knob(name="cache_v_bits", domain=IntRange(2, 8), default=8,
         applied_as=ExlArg("cache_v_bits", (("CacheLayer_quant", "v_bits"),)), applies_when=(QUANT_CACHE,),
         may_change_outputs=True, note="2..8 (cache/quant.py:30); no exllamav3 default"),
    Knob(name="cache_slots", domain=Categorical((1, 2, 4, 8, 16)), default=16,
         applied_as=ExlArg("cache_slots", (("Cache", "max_batch_size"),)), applies_when=(HYBRID,),
         may_change_outputs=False, note="recurrent-state slots, default 16 (cache.py:100); each costs VRAM"),
    Knob(name="recurrent_dtype", domain=Categorical(("half", "float")), default="half",
         applied_as=ExlArg("recurrent_dtype", (("Cache", "recurrent_dtype"),)), applies_when=(HYBRID,),
         may_change_outputs=True, note="GDN state storage, torch.half default (cache.py:102); float doubles it"),
    # --- Generator (generator/generator.py:34) ----------------------------------------------------
    Knob(name="max_batch_size", domain=Categorical((1, 2, 4, 8, 16, 32, 64, 128, 256)), default=256,
         applied_as=_gen("max_batch_size"), may_change_outputs=False,
         note="default 256 (generator.py:46); clamped to cache_slots on hybrid models"),
    Knob(name="max_chunk_size", domain=Categorical((512, 1024, 2048, 4096, 8192, 16384)), default=2048,
         applied_as=_gen("max_chunk_size", ("Model.load", "max_chunk_size"), ("Model.warmup", "max_chunk_size")),
         may_change_outputs=True, levers=(4096, 8192, 16384),
         note="prefill tokens per forward, default 2048 (generator.py:47); larger chunks raise the prefill "
              "workspace"),
    Knob(name="shared_chunk_size", domain=Categorical((USE_DEFAULT, 0.25, 1.0)), default=USE_DEFAULT,
         applied_as=_gen("shared_chunk_size"), to_field=_shared_chunk_tokens, may_change_outputs=True,
         note="fraction of max_chunk_size used while another job generates, rounded up to the page; "
              "default: half (generator.py:301)"),
    Knob(name="prefill_cooldown", domain=IntRange(0, 8), default=4, applied_as=_gen("prefill_cooldown"),
         may_change_outputs=False, note="iterations between prefill passes while jobs generate, default 4"),
    # --- Speculative decoding (generator.py:251-300) ----------------------------------------------
    Knob(name="draft_mode", domain=Categorical(("none", "ngram", "mtp", "dflash", "draft_model")), default="none",
         applied_as=ExlArg("draft_mode", (("Generator", "draft_model"), ("Generator", "draft_cache"),
                                          ("Model.load", "draft_model"),
                                          ("Model.from_config", "component"), ("Cache", "max_history"))),
         choice_requires=(("mtp", HAS_MTP), ("dflash", HAS_DFLASH), ("draft_model", HAS_CAUSAL_DRAFT)),
         may_change_outputs=True, levers=("ngram", "mtp", "dflash", "draft_model"),  # those this checkpoint allows
         note="ngram always; mtp with the checkpoint's MTP head; dflash / draft_model with the user's drafter "
              "of that kind (--draft-model). Lossless in distribution, not bit-identical: verify passes use "
              "other kernels"),
    Knob(name="num_draft_tokens", domain=IntRange(1, 16), default=USE_DEFAULT,
         applied_as=ExlArg("num_draft_tokens", (("Generator", "num_draft_tokens"), ("Cache", "max_history"))),
         applies_when=(SPECULATIVE,), may_change_outputs=True, resolved_default=_drafters_default,
         domain_for_context=_draft_tokens_for,
         note="default: the drafter's (MTP 4, n-gram 4, DFlash block_size - 1); at most a DFlash drafter's "
              "block_size - 1 in a study that has one"),
    Knob(name="ngram_match_min", domain=IntRange(1, 8), default=2, applied_as=_gen("ngram_match_min"),
         applies_when=(knob_is("draft_mode", "ngram"),), may_change_outputs=True,
         note="exllamav3's 0 means off; 2 is TabbyAPI's default for its ngram mode"),
    Knob(name="dynamic_draft_tokens", domain=Categorical((False, True)), default=False,
         applied_as=_gen("dynamic_draft_tokens"), applies_when=(DRAFT_MODEL,), may_change_outputs=True,
         note="confidence-cut drafts (MTP, DFlash, draft model); no effect on n-gram drafting (generator.py docstring)"),
    Knob(name="draft_confidence", domain=FloatRange(0.1, 0.9, step=0.05), default=0.4,
         applied_as=_gen("draft_confidence"), applies_when=(knob_is("dynamic_draft_tokens", True),),
         may_change_outputs=True, note="target acceptance for dynamic drafts, default 0.4"),
    Knob(name="sparse_draft_head", domain=Categorical((0, 4096, 8192, 16384, 32768)), default=0,
         applied_as=_gen("sparse_draft_head"), applies_when=(BORROWED_HEAD,), may_change_outputs=False,
         note="vocab columns of a dense fp16 draft head (N x hidden x 2 B VRAM); verification uses the full head"),
    Knob(name="hybrid_draft_tokens", domain=Categorical((0, 4, 8, 16, 32)), default=0,
         applied_as=ExlArg("hybrid_draft_tokens", (("Generator", "hybrid_draft_tokens"), ("Cache", "max_history"))),
         may_change_outputs=True, levers=(8,), note="suffix-match drafts on top of any mode; > 16 rows leave the graphed path"),
    # --- Recurrent state (hybrid models) ------------------------------------------------------------
    Knob(name="recurrent_cache_size", domain=Categorical((0, 1 * GiB, 2 * GiB, 4 * GiB, 8 * GiB)), default=4 * GiB,
         applied_as=_gen("recurrent_cache_size"), applies_when=(HYBRID,), may_change_outputs=False,
         note="host-RAM checkpoints of recurrent state, default 4 GiB; 0 disables prefix reuse on hybrids"),
    Knob(name="recurrent_checkpoint_interval", domain=Categorical((USE_DEFAULT, 512, 1024, 4096, 8192)),
         default=USE_DEFAULT, applied_as=_gen("recurrent_checkpoint_interval"), applies_when=(HYBRID,),
         may_change_outputs=False, note="default: the architecture's (2048 for Qwen3.5)"),
    Knob(name="recurrent_checkpoint_interval_pp", domain=Categorical((4096, 8192, 16384, 32768, 65536)),
         default=32768, applied_as=_gen("recurrent_checkpoint_interval_pp"), applies_when=(HYBRID,),
         may_change_outputs=False, note="checkpoint spacing during prompt ingestion, default 32768"),
    # --- Kernel variants: EXL3_* variables, read at import ------------------------------------------
    Knob(name="EXL3_INT8_GEMV", domain=Categorical((0, 1, 2)), default=2, applied_as=EnvVar("EXL3_INT8_GEMV", "2"),
         applies_when=(MUL1_WEIGHTS,), may_change_outputs=True,
         note="int8-activation GEMV for mul1 tensors: 2 plain (default, util/backend.py:44), "
              "1 with error feedback, 0 off"),
    Knob(name="EXL3_GEMV", domain=Categorical((0, 1, 2)), default=1, applied_as=EnvVar("EXL3_GEMV", "1"),
         applies_when=(EXL3_WEIGHTS,), may_change_outputs=True,
         note="fp16-accumulate small-m GEMV, default 1 (quant/exl3_gemv.cu:31)"),
    Knob(name="EXL3_HGEMM_F16ACC", domain=Categorical((USE_DEFAULT, 0, 1)), default=USE_DEFAULT,
         applied_as=EnvVar("EXL3_HGEMM_F16ACC", None), applies_when=(EXL3_WEIGHTS,), may_change_outputs=True,
         note="fp16-accumulator prefill GEMMs; default: a start-up speed test decides (hgemm_f16acc.cu:400)"),
    _switch("EXL3_NO_FUSED_RECONSTRUCT", 0, when=(EXL3_WEIGHTS,), lossy=True,
            note="1 reconstructs without folded Hadamards (modules/quant/exl3.py:14)"),
    _switch("EXL3_QKV_SLICE", 1, when=(EXL3_WEIGHTS,), lossy=True,
            note="Q/K/V as one sliced MGEMM at decode (util/backend.py:40)"),
    _switch("EXL3_GRAPHS", 1, lossy=False, note="CUDA-graph decode replay; same kernels either way (graph.cu:24)"),
    _switch("EXL3_BC_ATTN", 1, when=(HAS_ATTENTION,), lossy=True,
            note="graphed C++ decode attention (attention_fn/bc_attn.py:44)"),
    _switch("EXL3_QC_STAGING", 1, when=(QUANT_CACHE,), lossy=True,
            note="quantized-cache prefill through an fp16 scratch (triton_paged.py:737); 2 is a debug mode"),
    _switch("EXL3_BC_GDN", 1, when=(HYBRID,), lossy=True,
            note="whole GDN decode layer as one graphed call (gated_delta_net.py:23)"),
    Knob(name="EXL3_GDN_SUB_CHUNK", domain=Categorical((512, 1024, 2048, 4096, 8192)), default=2048,
         applied_as=EnvVar("EXL3_GDN_SUB_CHUNK", "2048"), applies_when=(HYBRID,), may_change_outputs=False,
         note="GDN prefill scan sub-range, default 2048; bit-identical (gated_delta_rule.py:95)"),
    _switch("EXL3_GDN_CONV_TOKEN_MAJOR", 1, when=(HYBRID,), lossy=True,
            note="prefill conv reads the projection in place, skipping a bf16 rounding (gated_delta_net.py:31)"),
    _switch("EXL3_GDN_PROJ_FP32", 0, when=(HYBRID,), lossy=True,
            note="fp32 GDN qkv projection in prefill (gated_delta_net.py:26)"),
)

_THREADS = (0, 1, 2, 4, 8, 16, 32, 64, 128)

TRANSFORMERS_KNOBS: tuple[Knob, ...] = (
    Knob(name="dtype", domain=Categorical(("float32", "bfloat16", "float16")), default="float32",
         applied_as=TransformersArg("dtype"), may_change_outputs=True, note="weights and activations"),
    Knob(name="attn_implementation", domain=Categorical(("sdpa", "eager")), default="sdpa",
         applied_as=TransformersArg("attn_implementation"), may_change_outputs=True,
         note="transformers' default is sdpa"),
    Knob(name="prefill_chunk_size", domain=Categorical((0, 64, 128, 256, 512)), default=0,
         applied_as=TransformersArg("prefill_chunk_size"), may_change_outputs=True, levers=(64, 128),
         note="tokens per prefill forward; 0 = the whole prompt at once"),
    Knob(name="threads", domain=Categorical(_THREADS), default=0, applied_as=TransformersArg("threads"),
         choice_requires=tuple((n, on_context(f"the host has at least {n} cores", lambda c, n=n: c.cpu_count >= n))
                               for n in _THREADS if n),
         may_change_outputs=True, note="torch intra-op threads (reduction order); 0 = torch's default"),
    Knob(name="max_batch_size", domain=Categorical((1, 2, 4, 8)), default=4,
         applied_as=TransformersArg("max_batch_size"), may_change_outputs=True,
         note="jobs decoded together (padding changes shapes when requests overlap)"),
)


def catalog_for(engine: str) -> tuple[Knob, ...]:
    """The catalog of `engine` ("exllamav3" or "transformers")."""
    catalogs = {"exllamav3": EXL3_KNOBS, "transformers": TRANSFORMERS_KNOBS}
    if engine not in catalogs:
        raise ValueError(f"no knob catalog for engine {engine!r}; expected one of: {', '.join(catalogs)}")
    return catalogs[engine]
