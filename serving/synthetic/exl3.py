"""A shape-true EXL3 checkpoint of any Qwen3_5 text config, with random codes, for GPU speed work.

No real weights reach the GPU machine, but exllamav3's speed depends only on shapes, bit rates and
the codebook, not on the values of the codes. An EXL3 linear is `trellis` int16
[in/16, out/16, 16*bits], `suh` fp16 [in], `svh` fp16 [out] and the `mul1` codebook constant.
Outputs of such a model are noise; its decode and prefill speed are the real model's.

With `mtp_layers=1` it is the published Qwen3.8-27B layout: a `Qwen3_5ForConditionalGeneration`
config (text_config, vision_config, preprocessor_config.json: what exllamav3's Qwen3_5VLConfig
reads; no vision tensors, which the text model never loads) with the MTP head exllamav3's
Qwen3_5MTPModel loads as `component="mtp"`: `mtp.pre_fc_norm_hidden`, `mtp.pre_fc_norm_embedding`,
`mtp.fc` (2H -> H), one attention + MLP block `mtp.layers.0.*` and `mtp.norm`, at `mtp_bits`. MTP
drafting's plumbing, memory and cost per step are then the real model's; its ACCEPTANCE IS NEAR ZERO,
because a random head does not predict a random trunk, so a decode speed measured with it is the
cost of drafting without the gain, never the real model's MTP speed.

Usage:
    write_exl3_checkpoint(Path("/tmp/q27"), QWEN38_27B, bits=4.0, head_bits=6)
    write_exl3_checkpoint(Path("/tmp/q27-mtp"), QWEN38_27B, mtp_layers=1, mtp_bits=4)
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from serving.synthetic.tiny import SPECIAL_TOKENS, THINK_TOKENS, build_tokenizer

__all__ = [
    "QWEN38_27B",
    "TensorSpec",
    "exl3_linear",
    "exl3_schema",
    "multimodal_config",
    "text_config",
    "write_exl3_checkpoint",
    "write_tensors",
]

MUL1 = 0x83DCD12D  # the mul1 codebook constant, stored as a signed int32 scalar
_DTYPES = {"I16": (np.int16, 2), "F16": (np.float16, 2), "BF16": (None, 2), "I32": (np.int32, 4)}

# Qwen3.8-27B's text dimensions (Qwen3.5 architecture, unchanged).
QWEN38_27B = dict(
    vocab_size=248320, hidden_size=5120, intermediate_size=17408, num_hidden_layers=64,
    num_attention_heads=24, num_key_value_heads=4, head_dim=256, linear_num_key_heads=16,
    linear_num_value_heads=48, linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4,
    full_attention_interval=4, max_position_embeddings=262144, partial_rotary_factor=0.25, rope_theta=10000000.0,
    rms_norm_eps=1e-6,
)


@dataclass(frozen=True)
class TensorSpec:
    dtype: str  # safetensors dtype name
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * _DTYPES[self.dtype][1]


def text_config(dims: dict, *, layers: int | None = None) -> dict:
    """A Qwen3_5ForCausalLM config.json for `dims`, with `layers` decoder layers (3 GDN : 1 attention)."""
    n = layers or dims["num_hidden_layers"]
    interval = dims.get("full_attention_interval", 4)
    layer_types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n)]
    rope = {"rope_type": "default", "rope_theta": dims.get("rope_theta", 10000.0),
            "partial_rotary_factor": dims.get("partial_rotary_factor", 0.25)}
    keys = ("vocab_size", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
            "head_dim", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
            "linear_value_head_dim", "linear_conv_kernel_dim", "max_position_embeddings")
    return {
        "architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text",
        **{k: dims[k] for k in keys},
        "num_hidden_layers": n, "layer_types": layer_types, "hidden_act": "silu", "attention_bias": False,
        "rms_norm_eps": dims.get("rms_norm_eps", 1e-6), "tie_word_embeddings": False, "dtype": "bfloat16",
        "partial_rotary_factor": rope["partial_rotary_factor"], "rope_parameters": rope,
        "bos_token_id": None, "use_cache": True,
    }


# Qwen3.5's vision tower as transformers' Qwen3_5VisionConfig defaults describe it; exllamav3's
# read_qwen3_vl_vision_config requires every one of these keys (deepstack: none in Qwen3.5)
_VISION = dict(model_type="qwen3_5", depth=27, hidden_size=1152, hidden_act="gelu_pytorch_tanh",
               intermediate_size=4304, num_heads=16, num_position_embeddings=2304, patch_size=16,
               spatial_merge_size=2, temporal_patch_size=2, deepstack_visual_indexes=[])
_PREPROCESSOR = dict(size={"shortest_edge": 65536, "longest_edge": 16777216}, patch_size=16, temporal_patch_size=2,
                     merge_size=2, image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5],
                     image_processor_type="Qwen2VLImageProcessorFast")


def multimodal_config(text: dict, *, mtp_layers: int) -> dict:
    """The published layout: Qwen3_5ForConditionalGeneration around `text`, with `mtp_layers` MTP layers.

    exllamav3 registers an MTP component only for this architecture (Qwen3_5VLConfig), not for the
    text-only Qwen3_5ForCausalLM.
    """
    inner = {k: v for k, v in text.items() if k not in ("architectures", "tie_word_embeddings")}
    inner.update(model_type="qwen3_5_text", mtp_num_hidden_layers=mtp_layers)
    return {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", "text_config": inner,
            "vision_config": {**_VISION, "out_hidden_size": text["hidden_size"]}, "tie_word_embeddings": False}


def exl3_linear(name: str, n_in: int, n_out: int, bits: float) -> dict[str, TensorSpec]:
    """One EXL3 linear: trellis int16 [in/16, out/16, 16*bits], suh fp16 [in], svh fp16 [out], mul1 int32."""
    return {
        f"{name}.trellis": TensorSpec("I16", (n_in // 16, n_out // 16, int(round(16 * bits)))),
        f"{name}.suh": TensorSpec("F16", (n_in,)),
        f"{name}.svh": TensorSpec("F16", (n_out,)),
        f"{name}.mul1": TensorSpec("I32", ()),
    }


def exl3_schema(config: dict, *, bits: float, head_bits: int, mtp_layers: int = 0,
                mtp_bits: int = 4) -> dict[str, TensorSpec]:
    """Tensor names, dtypes and shapes of an EXL3 conversion of `config` (as exllamav3 1.6.5 writes them).

    `mtp_layers`: multi-token-prediction layers (attention blocks plus the `mtp.fc` projection) at `mtp_bits`.
    """
    h, inter, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    qh, kvh, hd = config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]
    kh, vh = config["linear_num_key_heads"], config["linear_num_value_heads"]
    kd, vd, conv = config["linear_key_head_dim"], config["linear_value_head_dim"], config["linear_conv_kernel_dim"]
    conv_dim = 2 * kh * kd + vh * vd
    out: dict[str, TensorSpec] = {}

    def linear(name: str, n_in: int, n_out: int, b: float) -> None:
        out.update(exl3_linear(name, n_in, n_out, b))

    def attention(a: str, b: float) -> None:
        out[f"{a}.q_norm.weight"] = TensorSpec("BF16", (hd,))
        out[f"{a}.k_norm.weight"] = TensorSpec("BF16", (hd,))
        linear(f"{a}.q_proj", h, 2 * qh * hd, b)  # queries and the output gate, interleaved
        linear(f"{a}.k_proj", h, kvh * hd, b)
        linear(f"{a}.v_proj", h, kvh * hd, b)
        linear(f"{a}.o_proj", qh * hd, h, b)

    def mlp(m: str, b: float) -> None:
        for name, n_in, n_out in (("gate_proj", h, inter), ("up_proj", h, inter), ("down_proj", inter, h)):
            linear(f"{m}.{name}", n_in, n_out, b)

    p = "model.language_model"
    out[f"{p}.embed_tokens.weight"] = TensorSpec("BF16", (vocab, h))
    for i, kind in enumerate(config["layer_types"]):
        L = f"{p}.layers.{i}"
        out[f"{L}.input_layernorm.weight"] = TensorSpec("BF16", (h,))
        out[f"{L}.post_attention_layernorm.weight"] = TensorSpec("BF16", (h,))
        if kind == "linear_attention":
            a = f"{L}.linear_attn"
            out[f"{a}.A_log"] = TensorSpec("BF16", (vh,))
            out[f"{a}.dt_bias"] = TensorSpec("BF16", (vh,))
            out[f"{a}.conv1d.weight"] = TensorSpec("BF16", (conv_dim, 1, conv))
            out[f"{a}.in_proj_a.weight"] = TensorSpec("F16", (vh, h))
            out[f"{a}.in_proj_b.weight"] = TensorSpec("F16", (vh, h))
            out[f"{a}.norm.weight"] = TensorSpec("BF16", (vd,))
            linear(f"{a}.in_proj_qkv", h, conv_dim, bits)
            linear(f"{a}.in_proj_z", h, vh * vd, bits)
            linear(f"{a}.out_proj", vh * vd, h, bits)
        else:
            attention(f"{L}.self_attn", bits)
        mlp(f"{L}.mlp", bits)
    out[f"{p}.norm.weight"] = TensorSpec("BF16", (h,))
    linear("lm_head", h, vocab, head_bits)
    for i in range(mtp_layers):
        L = f"mtp.layers.{i}"
        out[f"{L}.input_layernorm.weight"] = TensorSpec("BF16", (h,))
        out[f"{L}.post_attention_layernorm.weight"] = TensorSpec("BF16", (h,))
        attention(f"{L}.self_attn", mtp_bits)
        mlp(f"{L}.mlp", mtp_bits)
    if mtp_layers:
        linear("mtp.fc", 2 * h, h, mtp_bits)
        for norm in ("mtp.pre_fc_norm_hidden", "mtp.pre_fc_norm_embedding", "mtp.norm"):
            out[f"{norm}.weight"] = TensorSpec("BF16", (h,))
    return out


def _tiled(block: np.ndarray, n: int, rng: np.random.Generator) -> bytes:
    """n values cut from a repeated random block at a random offset: random enough, and fast."""
    start = int(rng.integers(0, block.size - 1))
    reps = -(-(n + start) // block.size)
    return np.tile(block, reps)[start:start + n].tobytes()


def _values(name: str, spec: TensorSpec, rng: np.random.Generator, blocks: dict[str, np.ndarray]) -> bytes:
    """Random but numerically tame values: unit norms, sign-flip scales that keep activations bounded."""
    n = math.prod(spec.shape)
    if name.endswith(".mul1"):
        return struct.pack("<I", MUL1)
    if name.endswith(".trellis"):
        return _tiled(blocks["codes"], n, rng)
    if name.endswith("embed_tokens.weight") or (spec.dtype == "BF16" and n > 1 << 22):  # DFlash2's codebooks
        return _tiled(blocks["bf16_noise"], n, rng)
    if name.endswith(".suh"):
        return (rng.choice(np.array([-1.0, 1.0], dtype=np.float16), n)).astype(np.float16).tobytes()
    if name.endswith(".svh"):
        n_in = spec.shape[0]
        scale = 1.0 / math.sqrt(max(n_in, 1))
        return (rng.choice(np.array([-scale, scale], dtype=np.float32), n)).astype(np.float16).tobytes()
    if name.endswith(("layernorm.weight", ".norm.weight", "_norm.weight")) or name == "norm.weight":
        values = np.ones(n, dtype=np.float32)
    elif name.endswith("A_log"):
        values = np.log(rng.uniform(1.0, 16.0, n)).astype(np.float32)
    elif name.endswith("dt_bias"):
        values = np.full(n, 1.0, dtype=np.float32)
    elif spec.dtype == "F16":
        return (rng.standard_normal(n) * 0.02).astype(np.float16).tobytes()
    else:
        values = (rng.standard_normal(n) * 0.02).astype(np.float32)
    return _bf16(values)


def _bf16(values: np.ndarray) -> bytes:
    return (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()


def _shards(schema: dict[str, TensorSpec], max_bytes: int) -> Iterator[list[str]]:
    shard, size = [], 0
    for name, spec in schema.items():
        if shard and size + spec.nbytes > max_bytes:
            yield shard
            shard, size = [], 0
        shard.append(name)
        size += spec.nbytes
    if shard:
        yield shard


def write_exl3_checkpoint(out_dir: Path, dims: dict = QWEN38_27B, *, bits: float = 4.0, head_bits: int = 6,
                          layers: int | None = None, mtp_layers: int = 0, mtp_bits: int = 4, seed: int = 0,
                          shard_bytes: int = 4 * 1024**3, sparse: bool = False) -> Path:
    """Write config.json, sharded safetensors with an index, and a tokenizer covering the vocabulary.

    `mtp_layers` > 0: the multimodal config exllamav3 builds an MTP draft model for, with that many
    MTP layers at `mtp_bits` (see the module docstring: near-zero acceptance).
    `sparse`: true headers over holes (no data): for code that reads only headers, e.g. the memory model.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    text = text_config(dims, layers=layers)
    config = multimodal_config(text, mtp_layers=mtp_layers) if mtp_layers else text
    config["quantization_config"] = {"quant_method": "exl3", "version": "1.6.5", "bits": bits,
                                     "head_bits": head_bits, "calibration": {"rows": 0, "cols": 0},
                                     "out_scales": "auto", "codebook": "mul1"}
    if mtp_layers:
        config["quantization_config"]["mtp_bits"] = mtp_bits  # as exllamav3's converter records it
        (out_dir / "preprocessor_config.json").write_text(json.dumps(_PREPROCESSOR, indent=2))
    schema = exl3_schema(text, bits=bits, head_bits=head_bits, mtp_layers=mtp_layers, mtp_bits=mtp_bits)
    total = write_tensors(out_dir, schema, seed=seed, shard_bytes=shard_bytes, sparse=sparse)
    _write_tokenizer(out_dir, text["vocab_size"])
    ids = json.loads((out_dir / "tokenizer.json").read_text())
    special = {t["content"]: t["id"] for t in ids["added_tokens"]}
    for target in (config, config.get("text_config", config)):
        target["eos_token_id"] = special["<|im_end|>"]
        target["pad_token_id"] = special["<|endoftext|>"]
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    (out_dir / "SYNTHETIC.json").write_text(json.dumps(
        {"kind": "exl3-shape-true", "bits": bits, "head_bits": head_bits, "layers": text["num_hidden_layers"],
         "mtp_layers": mtp_layers, "mtp_bits": mtp_bits if mtp_layers else None,
         "mtp_acceptance": "near zero: random MTP head" if mtp_layers else None, "seed": seed, "bytes": total},
        indent=2))
    return out_dir


def write_tensors(out_dir: Path, schema: dict[str, TensorSpec], *, seed: int, shard_bytes: int = 4 * 1024**3,
                  sparse: bool = False) -> int:
    """Sharded safetensors of `schema` with random, numerically tame values (deterministic by seed), and
    their index; returns the tensors' total bytes. `sparse`: true headers over holes (no data)."""
    rng = np.random.default_rng(seed)
    blocks = {  # 32 MiB each, tiled: generating 14 GiB of fresh randomness would take minutes
        "codes": rng.integers(-32768, 32767, size=1 << 24, dtype=np.int16),
        "bf16_noise": np.frombuffer(_bf16(rng.standard_normal(1 << 24).astype(np.float32) * 0.02), dtype=np.uint16),
    }
    groups = list(_shards(schema, shard_bytes))
    weight_map = {}
    for index, names in enumerate(groups, start=1):
        fname = f"model-{index:05d}-of-{len(groups):05d}.safetensors"
        header, offset = {}, 0
        for name in names:
            spec = schema[name]
            header[name] = {"dtype": spec.dtype, "shape": list(spec.shape), "data_offsets": [offset, offset + spec.nbytes]}
            offset += spec.nbytes
            weight_map[name] = fname
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)
        with open(out_dir / fname, "wb") as f:
            f.write(struct.pack("<Q", len(raw)))
            f.write(raw)
            if sparse:
                f.truncate(8 + len(raw) + offset)
                continue
            for name in names:
                f.write(_values(name, schema[name], rng, blocks))
    total = sum(spec.nbytes for spec in schema.values())
    (out_dir / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1))
    return total


def _write_tokenizer(out_dir: Path, vocab_size: int) -> None:
    """The tiny BPE, widened with decodable filler tokens to the model's vocabulary size."""
    from serving.synthetic.tiny import write_chat_files

    tok = json.loads(build_tokenizer().to_str())
    vocab = tok["model"]["vocab"]
    added = tok["added_tokens"]
    n_fill = vocab_size - len(vocab) - len(added)
    base = len(vocab)
    for i in range(n_fill):
        vocab[f"Ġ~{i:x}"] = base + i  # byte-level text " ~<hex>": decodes, never produced by encoding
    for j, token in enumerate(added):
        token["id"] = base + n_fill + j
    (out_dir / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False))
    write_chat_files(out_dir, {t["content"]: t["id"] for t in added}, max_len=262144)
    assert [t["content"] for t in added] == SPECIAL_TOKENS + THINK_TOKENS
