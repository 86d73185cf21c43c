"""Predicts the VRAM an exllamav3 configuration needs, from the checkpoint's safetensors headers.

Every component follows exllamav3 1.6.5's own allocations: weights are the tensors it loads to the
GPU (an unquantized token embedding stays in system RAM, vision and unused MTP tensors are not
loaded); the KV cache is sized as cache/fp16.py and cache/quant.py allocate it; the recurrent state
as GDNLayerState allocates it per slot; drafts add their weights and cache; the prefill workspace is
the largest layer's transients for one chunk (or the draft model's, where larger). It predicts what torch allocates (the quantity
`torch.cuda.max_memory_allocated` reports); the CUDA context is the budget's reserve, and
`Calibration` corrects the rest from measured peaks.

Usage:
    memory = MemoryModel(read_model_info(model_dir))
    estimate = memory.estimate(config)
    estimate.resident_bytes, estimate.peak_bytes, estimate.components()
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from search_space.errors import SearchSpaceError
from search_space.model_info import ModelInfo, read_model_info
from serving.config import Exl3Args, ServingConfig

__all__ = ["MemoryEstimate", "MemoryModel"]

FP16 = 2
BF16 = 2
FP32 = 4
RECONSTRUCT_MIN_ROWS = 145  # modules/quant/exl3.py: above 144 rows a linear is reconstructed to fp16
# gated_delta_rule.py: "~112 KB/token at 48 v-heads x 128" of scan temporaries per sub-range token
GDN_SCAN_BYTES_PER_TOKEN_PER_V_DIM = 112_000 / (48 * 128)
QC_STAGING_MIN_ROWS = 256  # util/backend.py qc_prefill_two_pass_min_q on sm_80+


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryEstimate:
    """Predicted VRAM by component, in bytes. Resident = after load; peak = during a prefill chunk."""

    weights_bytes: int
    kv_cache_bytes: int
    recurrent_state_bytes: int
    draft_bytes: int
    workspace_bytes: int

    @property
    def resident_bytes(self) -> int:
        return self.weights_bytes + self.kv_cache_bytes + self.recurrent_state_bytes + self.draft_bytes

    @property
    def peak_bytes(self) -> int:
        return self.resident_bytes + self.workspace_bytes

    def components(self) -> dict[str, int]:
        return {
            "weights_bytes": self.weights_bytes,
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
        self.weights_bytes = _gpu_weight_bytes(model)
        self.mtp_weights_bytes = model.weight_bytes("mtp")
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
            weights_bytes=self.weights_bytes,
            kv_cache_bytes=kv,
            recurrent_state_bytes=recurrent,
            draft_bytes=self._draft_bytes(args),
            workspace_bytes=self._workspace_bytes(args, config.env),
        )

    def _draft_bytes(self, args: Exl3Args) -> int:
        """Draft weights, the draft's own KV cache (fp16, same token count), the sparse draft head."""
        sparse_head = args.sparse_draft_head * self.model.hidden_size * FP16
        if args.draft_mode == "mtp":
            if not self.model.has_mtp_weights:
                raise SearchSpaceError(f"{self.model.directory} has no MTP weights for draft_mode 'mtp'")
            cache = self.model.mtp_num_hidden_layers * _kv_layer_bytes(self.model, "fp16") * args.cache_tokens
            return self.mtp_weights_bytes + cache + sparse_head
        if args.draft_mode == "dflash":
            draft = self._draft_info(args)
            weights = draft.weight_bytes("text") + (draft.weight_bytes("embedding")
                                                   if draft.embedding_is_quantized else 0)
            cache = draft.num_attention_layers * _kv_layer_bytes(draft, "fp16") * args.cache_tokens
            return weights + cache + sparse_head
        if args.draft_mode == "draft_model":
            # a whole second model: its weights, its fp16 KV cache of the same token count, and, for a
            # hybrid drafter, its recurrent state per slot (the Generator pairs a draft state with each job's)
            draft = MemoryModel(self._draft_info(args))
            slots = args.cache_slots if draft.model.is_hybrid else 0
            return (draft.weights_bytes + args.cache_tokens * draft.kv_bytes_per_token("fp16")
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


def _gpu_weight_bytes(model: ModelInfo) -> int:
    """Text weights, plus the embedding where exllamav3 puts it on the GPU (quantized, or the tied head)."""
    embedding_on_gpu = model.embedding_is_quantized or model.head_is_embedding
    return model.weight_bytes("text") + (model.weight_bytes("embedding") if embedding_on_gpu else 0)


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
