"""Predicts the VRAM an exllamav3 configuration needs, from the checkpoint's safetensors headers.

Every component follows exllamav3 1.6.5's own allocations: weights are the tensors it loads to the
GPU (an unquantized token embedding stays in system RAM, vision and unused MTP tensors are not
loaded), as its loader lays them out (tensors of up to 16 MiB are carved from 128 MiB slabs); the
graph statics are the buffers each split-projection Gated DeltaNet layer keeps for its
graph-captured decode path; the KV cache is sized as cache/fp16.py and cache/quant.py allocate it; the recurrent state
as GDNLayerState allocates it per slot; drafts add their weights and cache; the prefill workspace is
the largest layer's transients for one chunk (or the draft model's, where larger). It predicts what torch allocates (the quantity
`torch.cuda.max_memory_allocated` reports); the CUDA context is the budget's reserve, and
`Calibration` corrects the rest from measured peaks.

What it leaves out (found allocation by allocation with .ci/gpu/memory_probe.py): the per-shape
scratch the decode paths keep after warm-up (exllamav3's g_tensor_cache), which the workspace's own
over-estimate roughly offsets at peak.

Usage:
    memory = MemoryModel(read_model_info(model_dir))
    estimate = memory.estimate(config)
    estimate.resident_bytes, estimate.peak_bytes, estimate.components()
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

from search_space.errors import SearchSpaceError
from search_space.model_info import ModelInfo, read_model_info, weight_group
from serving.config import PAGE_TOKENS, Exl3Args, ServingConfig

__all__ = ["MemoryEstimate", "MemoryModel"]

FP16 = 2
BF16 = 2
FP32 = 4
RECONSTRUCT_MIN_ROWS = 145  # modules/quant/exl3.py: above 144 rows a linear is reconstructed to fp16
# gated_delta_rule.py: "~112 KB/token at 48 v-heads x 128" of scan temporaries per sub-range token
GDN_SCAN_BYTES_PER_TOKEN_PER_V_DIM = 112_000 / (48 * 128)
QC_STAGING_MIN_ROWS = 256  # util/backend.py qc_prefill_two_pass_min_q on sm_80+
# loader/safetensors.py _arena_alloc: weights of up to ARENA_MAX_TENSOR are carved, 256-byte aligned,
# first fit, from ARENA_BLOCK slabs (EXL3_LOAD_ARENA=0 turns it off); larger ones are allocated alone
ARENA_BLOCK = 128 << 20
ARENA_MAX_TENSOR = 16 << 20
ARENA_ALIGN = 256
# BC_GatedDeltaNetSplit (gated_delta_net.h): graph-captured decode covers MAX_BSZ x MAX_QLEN rows
GDN_GRAPH_ROWS = 8 * 16
# model/config.py InferParams with the int8 GEMV on (the default): a sliced bundle stays fused below
# this width; at or above it only from this bit rate (Ampere's int8 GEMV cap + 1, the product's GPU)
MGEMM_N_THRESHOLD = 8192
MGEMM_K_THRESHOLD = 6


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryEstimate:
    """Predicted VRAM by component, in bytes. Resident = after load; peak = during a prefill chunk."""

    weights_bytes: int
    graph_statics_bytes: int
    kv_cache_bytes: int
    recurrent_state_bytes: int
    draft_bytes: int
    workspace_bytes: int

    @property
    def resident_bytes(self) -> int:
        return (self.weights_bytes + self.graph_statics_bytes + self.kv_cache_bytes + self.recurrent_state_bytes
                + self.draft_bytes)

    @property
    def peak_bytes(self) -> int:
        return self.resident_bytes + self.workspace_bytes

    def components(self) -> dict[str, int]:
        return {
            "weights_bytes": self.weights_bytes,
            "graph_statics_bytes": self.graph_statics_bytes,
            "kv_cache_bytes": self.kv_cache_bytes,
            "recurrent_state_bytes": self.recurrent_state_bytes,
            "draft_bytes": self.draft_bytes,
            "workspace_bytes": self.workspace_bytes,
            "resident_bytes": self.resident_bytes,
            "peak_bytes": self.peak_bytes,
        }


class MemoryModel:
    """VRAM predictions for one model and its draft checkpoint. Pure: reads no device.

    The draft checkpoint (DFlash drafter or small causal LM) is the one given, or else the one a
    configuration names in `draft_model_dir`, read from its headers once per directory.
    """

    def __init__(self, model: ModelInfo, draft_model: ModelInfo | None = None):
        self.model = model
        self.draft_model = draft_model
        self.weights_bytes = self.loaded_weight_bytes({})
        self.mtp_weights_bytes = self.loaded_weight_bytes({}, with_mtp=True) - self.weights_bytes
        self._drafts: dict[str, ModelInfo] = {}

    # --- per-token and per-slot sizes: computed here and nowhere else -------------------------------

    def kv_bytes_per_token(self, cache_kind: str = "fp16", k_bits: int | None = None,
                           v_bits: int | None = None) -> int:
        """Paged-cache bytes per token over every attention layer (fp16.py / quant.py allocations)."""
        return self.model.num_attention_layers * _kv_layer_bytes(self.model, cache_kind, k_bits, v_bits)

    def recurrent_bytes_per_slot(self, *, recurrent_dtype: str = "half", max_history: int = 0) -> int:
        """One slot of every GDN layer: two state rows, the conv ring, the speculative staging rows."""
        m = self.model
        if not m.is_hybrid:
            return 0
        state = 2 * m.linear_num_value_heads * m.linear_key_head_dim * m.linear_value_head_dim
        state_bytes = state * (FP16 if recurrent_dtype == "half" else FP32)
        conv_bytes = m.fdim_qkv * (m.linear_conv_kernel_dim + max_history) * BF16
        staging_bytes = (max_history + 1) * (m.fdim_qkv * BF16 + m.linear_num_value_heads * (BF16 + FP32))
        return m.num_linear_attention_layers * (state_bytes + conv_bytes + staging_bytes)

    def loaded_weight_bytes(self, env: dict[str, str], *, with_mtp: bool = False) -> int:
        """The weights as exllamav3's loader allocates them: the text model (and the embedding where it
        goes to the GPU), with the MTP head, which loads through the same loader, when asked."""
        tensors = _gpu_weight_tensors(self.model, with_mtp=with_mtp)
        return _loader_bytes(tensors, arena=env.get("EXL3_LOAD_ARENA", "1") != "0")

    def graph_statics_bytes(self, env: dict[str, str]) -> int:
        """What each split-projection GDN layer keeps for its graph-captured decode (BC_GatedDeltaNetSplit):
        the merged fp16 b/a projection, and the fp32 carrier of the sliced qkv+z bundle where it is built."""
        m = self.model
        if not (m.is_exl3 and m.has_split_gdn_projections) or env.get("EXL3_BC_GDN", "1") == "0":
            return 0
        per_layer = 2 * m.linear_num_value_heads * m.hidden_size * FP16
        if self._qkvz_bundled(env):
            per_layer += (m.fdim_qkv + m.linear_v_dim) * GDN_GRAPH_ROWS * FP32
        return m.num_linear_attention_layers * per_layer

    def _qkvz_bundled(self, env: dict[str, str]) -> bool:
        """gated_delta_net.py load_local: the qkv and z projections become one sliced bundle (SlicedMultiLinear)
        when slicing is on, their common slice width is whole 128-column blocks of at least 256, and the
        MGEMM policy keeps them fused (InferParams.use_mgemm)."""
        m = self.model
        if env.get("EXL3_QKV_SLICE", "1") == "0":
            return False
        width = math.gcd(m.fdim_qkv, m.linear_v_dim)
        if width % 128 or width < 256:
            return False
        if not m.has_mul1_codebook or env.get("EXL3_INT8_GEMV", "2") == "0":
            return True
        k_threshold = int(env.get("EXL3_MGEMM_K_THRESHOLD", MGEMM_K_THRESHOLD))
        n_threshold = int(env.get("EXL3_MGEMM_N_THRESHOLD", MGEMM_N_THRESHOLD))
        return m.gdn_qkv_bits >= k_threshold or (n_threshold > 0 and width < n_threshold)

    # --- the estimate ---------------------------------------------------------------------------------

    def estimate(self, config: ServingConfig) -> MemoryEstimate:
        """Predict resident and peak VRAM of an exllamav3 configuration.

        Raises:
            SearchSpaceError: the configuration is not for the exllamav3 engine, or it drafts with
                MTP/DFlash that this model (or the missing draft model) cannot provide.
        """
        if not isinstance(config.args, Exl3Args):
            raise SearchSpaceError(f"the memory model covers the exllamav3 engine, not {config.engine!r}")
        args = config.args
        kv = args.cache_tokens * self.kv_bytes_per_token(args.cache_kind, args.cache_k_bits, args.cache_v_bits)
        slots = args.cache_slots if self.model.is_hybrid else 0
        recurrent = slots * self.recurrent_bytes_per_slot(
            recurrent_dtype=args.recurrent_dtype, max_history=args.max_history)
        return MemoryEstimate(
            weights_bytes=self.loaded_weight_bytes(config.env),
            graph_statics_bytes=self.graph_statics_bytes(config.env),
            kv_cache_bytes=kv,
            recurrent_state_bytes=recurrent,
            draft_bytes=self._draft_bytes(args, config.env),
            workspace_bytes=self._workspace_bytes(args, config.env),
        )

    def _draft_bytes(self, args: Exl3Args, env: dict[str, str]) -> int:
        """Draft weights, the draft's own KV cache (fp16, same token count; a DFlash drafter's sliding-window
        layers keep a window ring per slot instead), the sparse draft head.

        The MTP head's weights are what it adds to the target's load (one loader, one set of slabs); a
        draft checkpoint has a loader, and slabs, of its own."""
        sparse_head = args.sparse_draft_head * self.model.hidden_size * FP16
        if args.draft_mode == "mtp":
            if not self.model.has_mtp_weights:
                raise SearchSpaceError(f"{self.model.directory} has no MTP weights for draft_mode 'mtp'")
            cache = self.model.mtp_num_hidden_layers * _kv_layer_bytes(self.model, "fp16") * args.cache_tokens
            mtp_weights = self.loaded_weight_bytes(env, with_mtp=True) - self.loaded_weight_bytes(env)
            return mtp_weights + cache + sparse_head
        if args.draft_mode == "dflash":
            draft = self._draft_info(args)
            groups = ("text", "embedding") if draft.embedding_is_quantized else ("text",)
            weights = _loader_bytes([t.nbytes for t in draft.tensors.values() if weight_group(t.name) in groups],
                                    arena=env.get("EXL3_LOAD_ARENA", "1") != "0")
            paged = draft.num_attention_layers - draft.num_sliding_attention_layers
            cache = paged * _kv_layer_bytes(draft, "fp16") * args.cache_tokens
            slots = args.cache_slots if self.model.is_hybrid else 0  # the draft Cache's max_batch_size
            return weights + cache + slots * _dflash_window_bytes_per_slot(draft) + sparse_head
        if args.draft_mode == "draft_model":
            # a whole second model: its weights, its fp16 KV cache of the same token count, and, for a
            # hybrid drafter, its recurrent state per slot (the Generator pairs a draft state with each job's)
            draft = MemoryModel(self._draft_info(args))
            slots = args.cache_slots if draft.model.is_hybrid else 0
            return (draft.loaded_weight_bytes(env) + draft.graph_statics_bytes(env) + args.cache_tokens * draft.kv_bytes_per_token("fp16")
                    + slots * draft.recurrent_bytes_per_slot(max_history=args.max_history))
        return 0

    def _draft_info(self, args: Exl3Args) -> ModelInfo:
        """The draft checkpoint's info: the one given, else the configuration's draft_model_dir (read once)."""
        if self.draft_model is not None:
            return self.draft_model
        directory = args.draft_model_dir
        if directory is None:
            raise SearchSpaceError(f"draft_mode {args.draft_mode!r} needs the draft model's info or a draft_model_dir")
        if directory not in self._drafts:
            self._drafts[directory] = read_model_info(Path(directory))
        return self._drafts[directory]

    def _workspace_bytes(self, args: Exl3Args, env: dict[str, str]) -> int:
        """Transients of one prefill chunk: the residual stream plus the hungriest layer kind."""
        m = self.model
        rows = args.max_chunk_size
        residual = rows * m.hidden_size * (FP32 + FP16)  # fp32 residual stream + fp16 normed input
        recon = m.is_exl3 and rows >= RECONSTRUCT_MIN_ROWS

        def reconstruct(part: str) -> int:
            in_features, out_features = m.largest_linear(part)
            return in_features * min(out_features, 32768) * FP16 if recon else 0  # MAX_RECONSTRUCT_SLICE_N

        # MLP (modules/mlp.py): gate and up outputs (act in place), down output
        mlp = rows * (2 * m.intermediate_size + m.hidden_size) * FP16 + reconstruct("mlp.")
        layers = [mlp]
        if m.is_hybrid:
            # GatedDeltaNet prefill: qkv fp16, z fp32, conv output bf16, scan output + gated norm, out proj
            per_row = m.fdim_qkv * FP16 + m.linear_v_dim * FP32 + m.fdim_qkv * BF16 + 2 * m.linear_v_dim * BF16
            per_row += m.hidden_size * FP16
            sub_chunk = int(env.get("EXL3_GDN_SUB_CHUNK", "2048")) or rows
            scan = int(min(rows, sub_chunk) * m.linear_v_dim * GDN_SCAN_BYTES_PER_TOKEN_PER_V_DIM)
            layers.append(rows * per_row + scan + reconstruct("linear_attn."))
        if m.num_attention_layers:
            q_out = m.num_attention_heads * m.head_dim
            per_row = (2 * q_out + 2 * m.num_kv_heads * m.head_dim + q_out) * FP16  # q + gate, k, v, output
            layers.append(rows * per_row + reconstruct("self_attn.") + self._qc_staging_bytes(args, env))
        # Hidden states the target exports for its drafter's own prefill (generator/job.py export_states):
        # the final state for MTP, the tapped layers' states for DFlash
        taps = 0
        if args.draft_mode == "mtp":
            taps = rows * m.hidden_size * FP16
        elif args.draft_mode == "dflash":
            taps = self._draft_info(args).dflash_target_layers * rows * m.hidden_size * FP16
        own = residual + max(layers) + taps
        if args.draft_mode == "dflash":
            # then the drafter takes the chunk's taps into its K/V (architecture/dflash.py
            # dflash_update_kv_from_target): the taps and their concatenation, fc reconstructed, fc and norm out
            fc_in, fc_out = self._draft_info(args).largest_linear("fc")
            fc = fc_in * min(fc_out, 32768) * FP16 if rows >= RECONSTRUCT_MIN_ROWS else 0
            own = max(own, 2 * taps + fc + 2 * rows * m.hidden_size * FP16)
        if args.draft_mode == "draft_model":
            # the drafter prefills the same chunks after the target, one model at a time: the larger peak counts
            plain = dataclasses.replace(args, draft_mode="none", draft_model_dir=None, num_draft_tokens=None,
                                        dynamic_draft_tokens=False, draft_confidence=0.4)
            return max(own, MemoryModel(self._draft_info(args))._workspace_bytes(plain, env))
        return own

    def _qc_staging_bytes(self, args: Exl3Args, env: dict[str, str]) -> int:
        """EXL3_QC_STAGING=1: a quantized cache's window is dequantized to an fp16 K/V scratch per call."""
        if args.cache_kind != "quant" or env.get("EXL3_QC_STAGING", "1") != "1":
            return 0
        if args.max_chunk_size < QC_STAGING_MIN_ROWS:
            return 0
        pages = int(env.get("EXL3_QC_STAGING_PAGES", "256"))
        tokens = min(args.cache_tokens, pages * 256)
        return tokens * 2 * self.model.num_kv_heads * self.model.head_dim * FP16


def _gpu_weight_tensors(model: ModelInfo, *, with_mtp: bool = False) -> list[int]:
    """Byte sizes of the tensors exllamav3 loads to the GPU: the text model, the embedding where it goes
    there (quantized, or the tied head), and the MTP head when it drafts."""
    groups = {"text"}
    if model.embedding_is_quantized or model.head_is_embedding:
        groups.add("embedding")
    if with_mtp:
        groups.add("mtp")
    return [t.nbytes for t in model.tensors.values() if weight_group(t.name) in groups]


def _loader_bytes(sizes: list[int], *, arena: bool) -> int:
    """What exllamav3's loader allocates for tensors of these sizes.

    With its arena on (the default), each tensor of up to 16 MiB is carved, 256-byte aligned, from a
    128 MiB slab; first fit over the open slabs packs a tail left by one tensor with later small ones,
    so the small tensors take whole slabs and no more. Larger tensors are allocated alone."""
    if not arena:
        return sum(sizes)
    large = sum(b for b in sizes if b > ARENA_MAX_TENSOR)
    small = sum(-(-b // ARENA_ALIGN) * ARENA_ALIGN for b in sizes if 0 < b <= ARENA_MAX_TENSOR)
    return large + -(-small // ARENA_BLOCK) * ARENA_BLOCK


def _dflash_window_bytes_per_slot(draft: ModelInfo) -> int:
    """A DFlash drafter's sliding-window layers, per slot: fp16 K and V rings of the window (the checkpoint's
    sliding_window - 1, architecture/dflash.py block_window) plus two pages of rollback, rounded up to pages
    (modules/sliding_attn.py SlidingAttention.kv_state_size, SWALayerState)."""
    if not draft.num_sliding_attention_layers:
        return 0
    window = (draft.sliding_window or 2048) - 1  # DFlashConfig's default sliding_window is 2048
    ring = -(-(window + 2 * PAGE_TOKENS) // PAGE_TOKENS) * PAGE_TOKENS
    return draft.num_sliding_attention_layers * 2 * ring * draft.num_kv_heads * draft.head_dim * FP16


def _kv_layer_bytes(model: ModelInfo, cache_kind: str, k_bits: int | None = None, v_bits: int | None = None) -> int:
    """One attention layer's bytes per token: fp16 K and V, or packed bits plus an fp16 scale per 32."""
    token_dim = model.num_kv_heads * model.head_dim
    if cache_kind == "fp16":
        return 2 * token_dim * FP16
    if k_bits is None or v_bits is None:
        raise SearchSpaceError("a quantized cache needs k_bits and v_bits")
    # cache/quant.py: int32 words of token_dim // 32 * bits per token, plus token_dim // 32 fp16 scales, K and V
    groups = token_dim // 32
    return groups * (k_bits + v_bits) * 4 + 2 * groups * FP16
