"""Session fixtures: header-only checkpoints written by search_space_checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest

from serving.synthetic.exl3 import exl3_linear
from tests.search_space.search_space_checkpoints import (
    QWEN38_27B,
    QWEN_TOKENS,
    TINY,
    Qwen35Dims,
    qwen35_config,
    qwen35_exl3_schema,
    write_checkpoint,
)


@pytest.fixture(scope="session")
def qwen27b_dir(tmp_path_factory) -> Path:
    """Shape-true Qwen3.8-27B at 4.0 bpw, head 6 bits, as the GPU machine's measurements used (no MTP)."""
    return write_checkpoint(tmp_path_factory.mktemp("qwen27b"), qwen35_config(QWEN38_27B),
                            qwen35_exl3_schema(QWEN38_27B), tokens=QWEN_TOKENS)


@pytest.fixture(scope="session")
def qwen27b_mtp_dir(tmp_path_factory) -> Path:
    """The published layout: multimodal config, one MTP layer at 4 bits, a vision tower."""
    return write_checkpoint(
        tmp_path_factory.mktemp("qwen27b_mtp"),
        qwen35_config(QWEN38_27B, mtp_layers=1, multimodal=True),
        qwen35_exl3_schema(QWEN38_27B, mtp_layers=1, vision=True),
        tokens=QWEN_TOKENS,
    )


@pytest.fixture(scope="session")
def tiny_exl3_dir(tmp_path_factory) -> Path:
    return write_checkpoint(tmp_path_factory.mktemp("tiny_exl3"), qwen35_config(TINY), qwen35_exl3_schema(TINY))


@pytest.fixture(scope="session")
def tiny_hf_dir(tmp_path_factory) -> Path:
    """A tiny Qwen3_5 in transformers' own layout (model.* names, bf16), as the CPU engine serves it."""
    d = TINY
    schema = {"model.embed_tokens.weight": ("BF16", [d.vocab, d.hidden]), "lm_head.weight": ("BF16", [d.vocab, d.hidden])}
    for i in range(len(d.layer_types)):
        schema[f"model.layers.{i}.mlp.gate_proj.weight"] = ("BF16", [d.intermediate, d.hidden])
    config = qwen35_config(d, quantized=False)
    return write_checkpoint(tmp_path_factory.mktemp("tiny_hf"), config, schema)


@pytest.fixture(scope="session")
def dense_exl3_dir(tmp_path_factory) -> Path:
    """A Llama-style EXL3 model: attention layers only, no recurrent state, no MTP."""
    d = Qwen35Dims(512, 1536, ("full_attention",) * 4, 4, 2, 128, 0, 0, 0, 0, 512, 8192)
    schema = {k: v for k, v in qwen35_exl3_schema(d).items()}
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 512,
              "intermediate_size": 1536, "num_hidden_layers": 4, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 128, "vocab_size": 512, "max_position_embeddings": 8192,
              "quantization_config": {"quant_method": "exl3", "bits": 4.0, "head_bits": 6, "codebook": "mul1"}}
    return write_checkpoint(tmp_path_factory.mktemp("dense"), config, schema)


@pytest.fixture(scope="session")
def dflash_dir(tmp_path_factory) -> Path:
    """A DFlash draft for the 27B: one attention layer, taps 5 target layers, block size 16."""
    d = Qwen35Dims(5120, 17408, ("full_attention",), 32, 8, 128, 0, 0, 0, 0, 248320, 262144)
    layer = "model.language_model.layers.0."
    parts = (layer + "input_layernorm.", layer + "self_attn.", layer + "mlp.")
    schema = {name[len("model.language_model."):]: spec for name, spec in qwen35_exl3_schema(d).items()
              if name.startswith(parts)}
    schema.update({name: (spec.dtype, list(spec.shape))
                   for name, spec in exl3_linear("fc", 5 * d.hidden, d.hidden, 4.0).items()})
    schema["norm.weight"] = ("BF16", [d.hidden])
    config = {"architectures": ["DFlashDraftModel"], "hidden_size": d.hidden, "intermediate_size": d.intermediate,
              "num_hidden_layers": 1, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
              "vocab_size": d.vocab, "rms_norm_eps": 1e-6, "hidden_act": "silu",
              "dflash_config": {"block_size": 16, "mask_token_id": 248319, "target_layer_ids": [1, 16, 31, 46, 61]},
              "quantization_config": {"quant_method": "exl3", "bits": 4.0, "head_bits": 6, "codebook": "mul1"}}
    return write_checkpoint(tmp_path_factory.mktemp("dflash"), config, schema)


# A small hybrid Qwen3_5 text model of the 27B's vocabulary: an autoregressive drafter for it.
SMALL_DRAFT = Qwen35Dims(1024, 3072, ("linear_attention",) * 3 + ("full_attention",), 8, 2, 256,
                         8, 8, 128, 4, 248320, 262144)


@pytest.fixture(scope="session")
def causal_draft_dir(tmp_path_factory) -> Path:
    """An ordinary causal LM (Qwen3_5ForCausalLM, 4 layers, EXL3 4 bpw) with the 27B's tokenizer."""
    return write_checkpoint(tmp_path_factory.mktemp("causal_draft"), qwen35_config(SMALL_DRAFT),
                            qwen35_exl3_schema(SMALL_DRAFT), tokens=QWEN_TOKENS)


@pytest.fixture(scope="session")
def foreign_tokenizer_draft_dir(tmp_path_factory) -> Path:
    """The same drafter with another tokenizer of the same size: ids mean other tokens."""
    tokens = {**QWEN_TOKENS, "Ġworld": 2}
    return write_checkpoint(tmp_path_factory.mktemp("foreign_draft"), qwen35_config(SMALL_DRAFT),
                            qwen35_exl3_schema(SMALL_DRAFT), tokens=tokens)
