"""Header-only checkpoints for the search_space tests (imported by conftest.py and the tests).

The memory model and the knob conditions read only config.json and safetensors headers, so a
sparse file with a true header stands in for a checkpoint of any size. The tensor layout is the
one exllamav3 1.6.5's converter wrote for a tiny Qwen3_5 model on the GPU machine
(data/qwen3_5-tiny-exl3-schema.json, reproduced exactly by `qwen35_exl3_schema(TINY)`), scaled to
Qwen3.8-27B's dimensions.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

from serving.synthetic.exl3 import exl3_schema

DATA = Path(__file__).parent / "data"
DTYPE_BYTES = {"I16": 2, "I32": 4, "F16": 2, "BF16": 2, "F32": 4}


@dataclass(frozen=True)
class Qwen35Dims:
    hidden: int
    intermediate: int
    layer_types: tuple[str, ...]
    q_heads: int
    kv_heads: int
    head_dim: int
    gdn_k_heads: int
    gdn_v_heads: int
    gdn_head_dim: int
    conv: int
    vocab: int
    max_position_embeddings: int


TINY = Qwen35Dims(512, 1536, ("linear_attention",) * 3 + ("full_attention",), 4, 2, 128, 2, 4, 128, 4, 512, 32768)
QWEN38_27B = Qwen35Dims(5120, 17408, (("linear_attention",) * 3 + ("full_attention",)) * 16, 24, 4, 256,
                        16, 48, 128, 4, 248320, 262144)


def qwen35_exl3_schema(d: Qwen35Dims, *, bits: float = 4.0, head_bits: int = 6, mtp_layers: int = 0,
                       mtp_bits: int = 4, vision: bool = False) -> dict[str, tuple[str, list[int]]]:
    """Tensor name -> (dtype, shape) of a Qwen3_5 checkpoint as exllamav3's converter writes it.

    The layout is serving.synthetic's (the same one the GPU checks load); this adapts it to the
    test's dimension record and adds a vision tensor where a multimodal checkpoint has one.
    """
    config = qwen35_config(d, bits=bits, head_bits=head_bits, mtp_layers=mtp_layers, quantized=False)
    specs = exl3_schema(config, bits=bits, head_bits=head_bits, mtp_layers=mtp_layers, mtp_bits=mtp_bits)
    schema = {name: (spec.dtype, list(spec.shape)) for name, spec in specs.items()}
    if vision:
        schema["model.visual.blocks.0.attn.qkv.weight"] = ("BF16", [3 * 1152, 1152])
    return schema


def qwen35_config(d: Qwen35Dims, *, bits: float = 4.0, head_bits: int = 6, mtp_layers: int = 0,
                  multimodal: bool = False, quantized: bool = True) -> dict:
    text = {
        "model_type": "qwen3_5_text", "hidden_size": d.hidden, "intermediate_size": d.intermediate,
        "num_hidden_layers": len(d.layer_types), "layer_types": list(d.layer_types),
        "num_attention_heads": d.q_heads, "num_key_value_heads": d.kv_heads, "head_dim": d.head_dim,
        "linear_num_key_heads": d.gdn_k_heads, "linear_num_value_heads": d.gdn_v_heads,
        "linear_key_head_dim": d.gdn_head_dim, "linear_value_head_dim": d.gdn_head_dim,
        "linear_conv_kernel_dim": d.conv, "vocab_size": d.vocab, "hidden_act": "silu", "rms_norm_eps": 1e-6,
        "max_position_embeddings": d.max_position_embeddings, "mtp_num_hidden_layers": mtp_layers,
        "tie_word_embeddings": False,
    }
    quant = {"quant_method": "exl3", "version": "1.6.5", "bits": bits, "head_bits": head_bits, "codebook": "mul1"}
    if multimodal:
        config = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
                  "text_config": text, "vision_config": {}, "tie_word_embeddings": False}
    else:
        config = {"architectures": ["Qwen3_5ForCausalLM"], **text}
    if quantized:
        config["quantization_config"] = quant
    return config


def write_safetensors(path: Path, schema: dict[str, tuple[str, list[int]]], *, sparse: bool = True) -> int:
    """A safetensors file with a true header; the data section is a hole (sparse) or zeros."""
    header, offset = {}, 0
    for name, (dtype, shape) in schema.items():
        size = math.prod(shape) * DTYPE_BYTES[dtype]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        if sparse:
            f.truncate(8 + len(blob) + offset)
        else:
            f.write(bytes(offset))
    return offset


def write_checkpoint(directory: Path, config: dict, schema: dict, *, tokens: dict[str, int] | None = None) -> Path:
    """config.json and a header-only model.safetensors; `tokens`: a tokenizer.json with that vocabulary."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    write_safetensors(directory / "model.safetensors", schema)
    if tokens is not None:
        write_tokenizer(directory, tokens)
    return directory


# A stand-in for Qwen's tokenizer: the drafter checks compare token -> id maps, not their size.
QWEN_TOKENS = {"hello": 0, "Ġworld": 1, "<|im_start|>": 248044, "<|im_end|>": 248045}


def write_tokenizer(directory: Path, tokens: dict[str, int]) -> None:
    """A tokenizer.json whose BPE vocabulary is `tokens` (the added tokens are those with '<|')."""
    added = [{"id": i, "content": t, "special": True} for t, i in tokens.items() if t.startswith("<|")]
    vocab = {t: i for t, i in tokens.items() if not t.startswith("<|")}
    (directory / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE", "vocab": vocab, "merges": []},
                                                          "added_tokens": added}))
