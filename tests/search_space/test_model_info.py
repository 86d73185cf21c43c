import json
import struct

import pytest

from search_space.errors import ModelInfoError
from search_space.model_info import read_model_info, read_safetensors_header
from tests.search_space.search_space_checkpoints import (
    DATA,
    QWEN38_27B,
    TINY,
    qwen35_config,
    qwen35_exl3_schema,
    write_checkpoint,
    write_safetensors,
)

GiB = 1024**3


def test_the_fixture_schema_is_exactly_what_exllamav3_wrote_for_the_tiny_model():
    recorded = json.loads((DATA / "qwen3_5-tiny-exl3-schema.json").read_text())
    generated = {name: [dtype, list(shape)] for name, (dtype, shape) in qwen35_exl3_schema(TINY).items()}
    assert generated == recorded


def test_the_fixture_schema_matches_the_shape_true_checkpoint_serving_writes_for_the_gpu():
    from serving.synthetic import exl3 as synthetic

    config = synthetic.text_config(synthetic.QWEN38_27B)
    theirs = {n: (s.dtype, tuple(s.shape)) for n, s in synthetic.exl3_schema(config, bits=4.0, head_bits=6).items()}
    ours = {n: (dtype, tuple(shape)) for n, (dtype, shape) in qwen35_exl3_schema(QWEN38_27B).items()}
    assert theirs == ours


def test_shape_true_27b_headers_add_up_to_the_checkpoint_size_measured_on_the_gpu_machine(qwen27b_dir):
    info = read_model_info(qwen27b_dir)
    assert info.total_bytes / GiB == pytest.approx(14.6, abs=0.05)  # "(14.6 GiB)" in device/README.md
    assert info.weight_bytes("embedding") == 248320 * 5120 * 2
    assert not info.embedding_is_quantized
    assert (info.num_linear_attention_layers, info.num_attention_layers) == (48, 16)
    assert info.is_hybrid and info.is_exl3 and info.has_mul1_codebook and not info.has_mtp_weights
    assert (info.num_kv_heads, info.head_dim, info.fdim_qkv, info.linear_v_dim) == (4, 256, 10240, 6144)
    assert info.bits == 4.0 and info.head_bits == 6


def test_multimodal_checkpoint_reads_its_text_config_and_groups_mtp_and_vision_tensors(qwen27b_mtp_dir):
    info = read_model_info(qwen27b_mtp_dir)
    assert info.architecture == "Qwen3_5ForConditionalGeneration"
    assert info.hidden_size == 5120 and info.num_layers == 64 and info.mtp_num_hidden_layers == 1
    assert info.has_mtp_weights
    # ~0.22 GB: one block plus fc 10240 -> 5120 at mtp_bits 4 (exllamav3-knobs.md, derived)
    assert info.weight_bytes("mtp") == pytest.approx(0.22e9, rel=0.05)
    assert info.weight_bytes("vision") == 3 * 1152 * 1152 * 2
    assert info.weight_bytes("text") == read_model_info_text_bytes_without_extras()


def read_model_info_text_bytes_without_extras() -> int:
    schema = qwen35_exl3_schema(QWEN38_27B)
    sizes = {"I16": 2, "I32": 4, "F16": 2, "BF16": 2}
    total = 0
    for name, (dtype, shape) in schema.items():
        if ".embed_tokens." not in name:
            n = 1
            for dim in shape:
                n *= dim
            total += n * sizes[dtype]
    return total


def test_mtp_tensors_without_mtp_layers_in_the_config_are_not_an_mtp_head(tmp_path):
    directory = write_checkpoint(tmp_path, qwen35_config(TINY, mtp_layers=0), qwen35_exl3_schema(TINY, mtp_layers=1))
    assert not read_model_info(directory).has_mtp_weights


def test_layer_types_follow_exllamav3s_interval_rule_when_the_config_omits_them(tmp_path):
    config = qwen35_config(TINY)
    del config["layer_types"]
    config["full_attention_interval"] = 2
    info = read_model_info(write_checkpoint(tmp_path, config, qwen35_exl3_schema(TINY)))
    assert info.layer_types == ("linear_attention", "full_attention") * 2


def test_transformers_layout_is_unquantized_with_its_embedding_in_system_ram(tiny_hf_dir):
    info = read_model_info(tiny_hf_dir)
    assert not info.is_exl3 and not info.has_mul1_codebook and not info.embedding_is_quantized
    assert info.weight_bytes("embedding") == 512 * 512 * 2


def test_largest_linear_reads_exl3_suh_and_svh(qwen27b_dir):
    info = read_model_info(qwen27b_dir)
    assert info.largest_linear("mlp.") in {(5120, 17408), (17408, 5120)}
    assert info.largest_linear("linear_attn.") == (5120, 10240)
    assert info.largest_linear("self_attn.") == (5120, 12288)
    assert info.largest_linear("no such part") == (0, 0)


def test_a_truncated_checkpoint_is_refused_naming_the_tensor(tmp_path):
    directory = write_checkpoint(tmp_path, qwen35_config(TINY), qwen35_exl3_schema(TINY))
    path = directory / "model.safetensors"
    with path.open("r+b") as f:
        f.truncate(path.stat().st_size - 1)
    with pytest.raises(ModelInfoError, match="truncated"):
        read_model_info(directory)


@pytest.mark.parametrize(
    "blob, message",
    [(b"\x01\x02", "too short"), (struct.pack("<Q", 10**12), "header"), (struct.pack("<Q", 4) + b"{{{{", "malformed"),
     (struct.pack("<Q", 2) + b"[]", "not a JSON object")],
)
def test_malformed_safetensors_headers_are_refused(tmp_path, blob, message):
    path = tmp_path / "model.safetensors"
    path.write_bytes(blob)
    with pytest.raises(ModelInfoError, match=message):
        read_safetensors_header(path)


def test_a_header_whose_byte_span_disagrees_with_its_shape_is_refused(tmp_path):
    path = tmp_path / "model.safetensors"
    header = json.dumps({"w": {"dtype": "F16", "shape": [4], "data_offsets": [0, 4]}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + bytes(4))
    with pytest.raises(ModelInfoError, match="needs 8"):
        read_safetensors_header(path)


def test_directories_without_config_or_weights_are_refused(tmp_path):
    with pytest.raises(ModelInfoError, match="no config.json"):
        read_model_info(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelInfoError, match="no \\*.safetensors"):
        read_model_info(tmp_path)
    write_safetensors(tmp_path / "model.safetensors", {"w": ("F16", [2])})
    with pytest.raises(ModelInfoError, match="lacks 'hidden_size'"):
        read_model_info(tmp_path)


def test_the_config_exllamav3s_converter_wrote_is_read_as_a_hybrid_exl3_model(tmp_path):
    """data/ holds the config.json of the tiny conversion on the GPU machine, quantization_config inline."""
    config = json.loads((DATA / "qwen3_5-tiny-exl3-config.json").read_text())
    info = read_model_info(write_checkpoint(tmp_path, config, qwen35_exl3_schema(TINY)))
    assert (info.architecture, info.bits, info.head_bits, info.codebook) == ("Qwen3_5ForCausalLM", 4.0, 6, "mul1")
    assert info.is_exl3 and info.is_hybrid and info.num_attention_layers == 1
    assert (info.num_kv_heads, info.head_dim, info.fdim_qkv, info.max_position_embeddings) == (2, 128, 1024, 32768)
