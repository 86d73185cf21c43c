"""The shape-true writer's MTP head against what the installed exllamav3 loads, at a tiny shape (CPU).

The expected tensor names are derived from exllamav3's own Qwen3_5MTPModel source (the `key*`
arguments of its modules), so a rename upstream fails here rather than on the GPU.
"""

import ast
import json
import re

import pytest

from search_space.memory import MemoryModel
from search_space.model_info import read_model_info
from serving.config import ServingConfig
from serving.exl3_surface import installed_surface
from serving.synthetic.exl3 import QWEN38_27B, write_exl3_checkpoint

TINY = {**QWEN38_27B, "vocab_size": 2048, "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 64, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
        "linear_key_head_dim": 64, "linear_value_head_dim": 64, "max_position_embeddings": 4096}
_TUPLE_KEYS = re.compile(r'\("(\w+)",\s*(?:list|int|str|dict)\)')


@pytest.fixture(scope="module")
def mtp_dir(tmp_path_factory):
    return write_exl3_checkpoint(tmp_path_factory.mktemp("q27mtp") / "q", TINY, layers=4, mtp_layers=1, mtp_bits=4)


def _expected_mtp_tensors(mtp_layers: int) -> set[str]:
    """Tensor names Qwen3_5MTPModel (dense MLP) loads, from the `key*` arguments in its source."""
    tree = ast.parse((installed_surface().root / "architecture" / "qwen3_5_mtp.py").read_text())

    def text(node) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.JoinedStr):  # f"mtp.layers.{idx}.self_attn"
            return "".join(v.value if isinstance(v, ast.Constant) else "{idx}" for v in node.values)
        return None

    names: set[str] = set()
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)):
        kw = {k.arg: text(k.value) for k in call.keywords if k.arg and k.arg.startswith("key")}
        kind = call.func.id
        if kind == "RMSNorm":
            names.add(kw["key"] + ".weight")
        elif kind == "Attention":
            names.update(f"{kw['key']}.{kw[k]}.trellis" for k in ("key_q", "key_k", "key_v", "key_o"))
        elif kind == "GatedMLP" and "shared_expert" not in kw["key"]:
            names.update(f"{kw['key']}.{kw[k]}.trellis" for k in ("key_up", "key_gate", "key_down"))
        elif kind == "Qwen3_5MTPInputLayer":
            names.update({kw["key_pre_fc_norm_hidden"] + ".weight", kw["key_pre_fc_norm_embedding"] + ".weight",
                          kw["key_fc"] + ".trellis"})
    assert len(names) > 10, "the parse found exllamav3's MTP modules"
    return {n.replace("{idx}", str(i)) for n in names for i in range(mtp_layers)}


def test_the_checkpoint_holds_every_mtp_tensor_exllamav3_loads(mtp_dir):
    info = read_model_info(mtp_dir)
    expected = _expected_mtp_tensors(1)
    assert {"mtp.fc.trellis", "mtp.layers.0.self_attn.q_proj.trellis", "mtp.norm.weight"} <= expected
    missing = expected - set(info.tensors)
    assert not missing, sorted(missing)
    assert info.tensors["mtp.fc.trellis"].shape == (2 * 256 // 16, 256 // 16, 64)  # 2H -> H at 4 bits
    assert info.has_mtp_weights and info.mtp_num_hidden_layers == 1


def test_the_config_is_the_architecture_exllamav3_builds_an_mtp_drafter_for(mtp_dir):
    config = json.loads((mtp_dir / "config.json").read_text())
    assert config["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    assert installed_surface().architecture("Qwen3_5ForConditionalGeneration").has_mtp_component
    assert config["text_config"]["mtp_num_hidden_layers"] == 1
    assert config["quantization_config"]["mtp_bits"] == 4
    assert config["eos_token_id"] == config["text_config"]["eos_token_id"]


def test_the_vision_and_preprocessor_configs_have_every_key_exllamav3_reads(mtp_dir):
    """Qwen3_5VLConfig reads both files (no defaults) even when only the text model is loaded."""
    source = (installed_surface().root / "architecture" / "qwen3_vl.py").read_text()
    vision_src = source[source.index("def read_qwen3_vl_vision_config"):source.index("def read_qwen3_vl_pp_config")]
    pp_src = source[source.index("def read_qwen3_vl_pp_config"):]
    pp_src = pp_src[:pp_src.index("\nclass ")]
    config = json.loads((mtp_dir / "config.json").read_text())
    preprocessor = json.loads((mtp_dir / "preprocessor_config.json").read_text())
    assert set(_TUPLE_KEYS.findall(vision_src)) <= set(config["vision_config"])
    assert set(_TUPLE_KEYS.findall(pp_src)) <= set(preprocessor)
    assert f'"{config["vision_config"]["model_type"]}"' in vision_src
    assert preprocessor["image_processor_type"] in pp_src
    assert config["vision_config"]["deepstack_visual_indexes"] == []  # no deepstack tensors in the text model


def test_the_search_space_offers_mtp_and_the_memory_model_prices_it(mtp_dir):
    from search_space.knobs import SpaceContext
    from search_space.space import build_space

    info = read_model_info(mtp_dir)
    assert "mtp" in build_space(SpaceContext(engine="exllamav3", model=info)).knob("draft_mode").domain.choices
    memory = MemoryModel(info)
    plain = memory.estimate(ServingConfig.from_dict({"engine": "exllamav3", "args": {"cache_slots": 1}}))
    mtp = memory.estimate(ServingConfig.from_dict({"engine": "exllamav3", "args": {
        "cache_slots": 1, "draft_mode": "mtp"}}))
    assert mtp.draft_bytes > info.weight_bytes("mtp") > 0
    assert mtp.weights_bytes == plain.weights_bytes


def test_without_mtp_layers_the_layout_is_unchanged(tmp_path):
    plain = write_exl3_checkpoint(tmp_path / "plain", TINY, layers=4, sparse=True)
    config = json.loads((plain / "config.json").read_text())
    assert config["architectures"] == ["Qwen3_5ForCausalLM"] and "text_config" not in config
    assert not (plain / "preprocessor_config.json").exists()
    assert not read_model_info(plain).has_mtp_weights
