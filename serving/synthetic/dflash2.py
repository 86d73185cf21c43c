"""A shape-true EXL3 DFlash2 drafter for the shape-true Qwen3.8-27B, with random codes, for GPU work.

The published drafter (z-lab/Qwen3.8-27B-DFlash2; incoai's EXL3 4.00 bpw conversion, about 1.25 GB)
is a `DFlash2DraftModel`: five sliding-window (2048) attention layers of 32 query / 8 KV heads of 128,
an MLP of the target's width, reading the target's hidden states after layers 5/19/33/47/61 through
`fc` (5 x 5120 -> 5120) and `hidden_norm`, drafting a block of 8 (7 drafts per pass) in one
non-causal forward, with two-tap dynamic convolutions around every sublayer and a rank-256 top-16
candidate selector. It borrows the target's embedding and head. This writes that config and the
tensors exllamav3 1.6.5's architecture/dflash2.py loads, as its converter lays them out: the linears
with a qmap (fc, attention, MLP, the convolutions' kernel_projection) as EXL3 trellis/suh/svh/mul1,
the selector's hidden_projection fp16, norms, base kernels and codebooks bf16.

RANDOM WEIGHTS DRAFT NOTHING USEFUL: acceptance is about zero, so a decode speed measured with this
drafter is the cost of drafting without the gain. Only its memory, its plumbing (exllamav3 loads it,
attaches it to the target, taps the target's states) and its per-round cost (draft pass + verify)
are the real drafter's.

Usage:
    write_dflash2_drafter(Path("/tmp/q27-dflash2"))                    # for the 64-layer 27B
    write_dflash2_drafter(Path("/tmp/d"), TINY_DRAFT, target_layer_ids=(1, 2))   # tests
"""

from __future__ import annotations

import json
from pathlib import Path

from serving.synthetic.exl3 import QWEN38_27B, TensorSpec, exl3_linear, write_tensors

__all__ = ["QWEN38_27B_DFLASH2", "dflash2_config", "dflash2_schema", "write_dflash2_drafter"]

# z-lab/Qwen3.8-27B-DFlash2 config.json (published), the keys exllamav3's DFlash2Config reads
QWEN38_27B_DFLASH2 = dict(
    hidden_size=QWEN38_27B["hidden_size"], intermediate_size=QWEN38_27B["intermediate_size"], num_hidden_layers=5,
    num_attention_heads=32, num_key_value_heads=8, head_dim=128, sliding_window=2048, is_causal=False,
    vocab_size=QWEN38_27B["vocab_size"], max_position_embeddings=262144, rms_norm_eps=1e-6, rope_theta=10000000,
    num_target_layers=QWEN38_27B["num_hidden_layers"],
    dflash_config=dict(block_size=8, conv_group_size=16, conv_kernel_size=2, mask_token_id=248070,
                       selector_rank=256, selector_top_k=16, target_layer_ids=[5, 19, 33, 47, 61]),
)


def dflash2_config(dims: dict = QWEN38_27B_DFLASH2, *, bits: float = 4.0) -> dict:
    """config.json of the drafter: the published keys plus the EXL3 quantization_config."""
    n = dims["num_hidden_layers"]
    keys = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "head_dim", "sliding_window", "is_causal", "vocab_size", "max_position_embeddings", "rms_norm_eps",
            "num_target_layers")
    return {
        "architectures": ["DFlash2DraftModel"], "model_type": "qwen3", "dtype": "bfloat16", "hidden_act": "silu",
        "attention_bias": False, "tie_word_embeddings": False, "use_sliding_window": True, "max_window_layers": n,
        **{k: dims[k] for k in keys},
        "layer_types": ["sliding_attention"] * n,
        "rope_parameters": {"rope_type": "default", "rope_theta": dims["rope_theta"]},
        "dflash_config": dict(dims["dflash_config"]),
        "quantization_config": {"quant_method": "exl3", "version": "1.6.5", "bits": bits, "head_bits": 6,
                                "calibration": {"rows": 0, "cols": 0}, "out_scales": "auto", "codebook": "mul1"},
    }


def dflash2_schema(config: dict, *, bits: float) -> dict[str, TensorSpec]:
    """Tensor names, dtypes and shapes exllamav3 1.6.5's DFlash2Model loads for `config` (no key prefix)."""
    dc = config["dflash_config"]
    h, inter, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    qh, kvh, hd = config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]
    kernel, groups, rank = dc["conv_kernel_size"], h // dc["conv_group_size"], dc["selector_rank"]
    out: dict[str, TensorSpec] = {}

    def linear(name: str, n_in: int, n_out: int) -> None:
        out.update(exl3_linear(name, n_in, n_out, bits))

    linear("fc", len(dc["target_layer_ids"]) * h, h)  # DFlashInputLayer: the concatenated taps -> hidden
    out["hidden_norm.weight"] = TensorSpec("BF16", (h,))
    for i in range(config["num_hidden_layers"]):
        L = f"layers.{i}"
        out[f"{L}.input_layernorm.weight"] = TensorSpec("BF16", (h,))
        out[f"{L}.post_attention_layernorm.weight"] = TensorSpec("BF16", (h,))
        out[f"{L}.self_attn.q_norm.weight"] = TensorSpec("BF16", (hd,))
        out[f"{L}.self_attn.k_norm.weight"] = TensorSpec("BF16", (hd,))
        linear(f"{L}.self_attn.q_proj", h, qh * hd)
        linear(f"{L}.self_attn.k_proj", h, kvh * hd)
        linear(f"{L}.self_attn.v_proj", h, kvh * hd)
        linear(f"{L}.self_attn.o_proj", qh * hd, h)
        for name, n_in, n_out in (("gate_proj", h, inter), ("up_proj", h, inter), ("down_proj", inter, h)):
            linear(f"{L}.mlp.{name}", n_in, n_out)
        for conv in ("attention_conv", "mlp_conv"):  # DFlash2DynConv: [prepare, finish] x kernel x hidden
            out[f"{L}.{conv}.base_kernel"] = TensorSpec("BF16", (2, kernel, h))
            linear(f"{L}.{conv}.kernel_projection", h, 2 * kernel * groups)
    out["norm.weight"] = TensorSpec("BF16", (h,))
    out["candidate_selector.hidden_projection.weight"] = TensorSpec("F16", (rank, h))  # no qmap: not quantized
    out["candidate_selector.predecessor_codebook"] = TensorSpec("BF16", (vocab, rank))
    out["candidate_selector.successor_codebook"] = TensorSpec("BF16", (vocab, rank))
    return out


def write_dflash2_drafter(out_dir: Path, dims: dict = QWEN38_27B_DFLASH2, *, bits: float = 4.0, seed: int = 0,
                          target_layer_ids: tuple[int, ...] | None = None, sparse: bool = False) -> Path:
    """Write config.json, safetensors with an index and SYNTHETIC.json (see the module docstring: it
    drafts nothing useful). `target_layer_ids`: other taps (for a target of fewer layers than 64)."""
    if target_layer_ids is not None:
        dims = {**dims, "dflash_config": {**dims["dflash_config"], "target_layer_ids": list(target_layer_ids)}}
    out_dir.mkdir(parents=True, exist_ok=True)
    config = dflash2_config(dims, bits=bits)
    total = write_tensors(out_dir, dflash2_schema(config, bits=bits), seed=seed, sparse=sparse)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    (out_dir / "SYNTHETIC.json").write_text(json.dumps(
        {"kind": "exl3-dflash2-shape-true", "bits": bits, "seed": seed, "bytes": total,
         "target_layer_ids": config["dflash_config"]["target_layer_ids"],
         "acceptance": "about zero: random drafter; only its memory, plumbing and per-round cost are the "
                       "real drafter's"}, indent=2))
    return out_dir
