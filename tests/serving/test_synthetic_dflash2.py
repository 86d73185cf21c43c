"""The synthetic DFlash2 drafter against what the installed exllamav3 loads (CPU, never imports exllamav3).

The expected tensor names are derived from exllamav3's own DFlash2 source (architecture/dflash2.py and the
modules it builds: the `key*` arguments, the f-string keys of the convolutions and the selector), and the
required config keys from its DFlash2Config/DFlashConfig `read_cfg(..., no_default)` calls, so a rename
upstream fails here rather than on the GPU.
"""

import ast
import json

import pytest

from search_space.model_info import read_model_info
from serving.drafter import check_draft_tokens, read_drafter
from serving.errors import ConfigError
from serving.exl3_surface import installed_surface
from serving.synthetic.dflash2 import QWEN38_27B_DFLASH2, write_dflash2_drafter
from serving.synthetic.exl3 import QWEN38_27B

TINY = {**QWEN38_27B_DFLASH2, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 2048,
        "dflash_config": {**QWEN38_27B_DFLASH2["dflash_config"], "mask_token_id": 2000, "selector_rank": 32,
                          "target_layer_ids": [1, 2, 3]}}


@pytest.fixture(scope="module")
def drafter_dir(tmp_path_factory):
    return write_dflash2_drafter(tmp_path_factory.mktemp("dflash2") / "d", TINY)


def _source(relative: str) -> ast.Module:
    return ast.parse((installed_surface().root / relative).read_text())


def _text(node, names: dict[str, str]) -> str | None:
    """A key argument as text: a constant, an f-string ({idx}/{name}/{key} kept), or self.<class attribute>."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{" + ast.unparse(v.value) + "}"
                       for v in node.values)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return names.get(node.attr)
    if isinstance(node, ast.Name):
        return "{" + node.id + "}"
    return None


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)


def _module_keys(tree: ast.Module, cls: str) -> tuple[set[str], set[str], set[str]]:
    """(quantizable linears, fp16 linears, raw tensors) a module class loads, as suffixes of its `{key}`."""
    quantized, plain, raw = set(), set(), set()
    for node in ast.walk(_class(tree, cls)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Linear":
            kw = {k.arg: k.value for k in node.keywords}
            key = _text(kw["key"], {})
            (quantized if "qmap" in kw else plain).add(key)
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Attribute) \
                and node.targets[0].attr.startswith("key_") and isinstance(node.value, ast.JoinedStr):
            raw.add(_text(node.value, {}))
    return quantized, plain, raw


def expected_dflash2_tensors(layers: int) -> dict[str, str]:
    """Tensor name -> "exl3" (trellis/suh/svh/mul1), "fp16" (.weight) or "raw" (the name itself), from the source."""
    arch = _source("architecture/dflash2.py")
    model = _class(arch, "DFlash2Model")
    attrs = {t.id: n.value.value for n in model.body if isinstance(n, ast.Assign)
             for t in n.targets if isinstance(t, ast.Name) and isinstance(n.value, ast.Constant)}
    convs = {n.args[0].value for n in ast.walk(model) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
             and n.func.id == "dynconv"}
    mods = _source("modules/arch_specific/dflash2.py")
    out: dict[str, str] = {}

    def add(key: str, suffixes: tuple[set[str], set[str], set[str]]) -> None:
        for kind, names in zip(("exl3", "fp16", "raw"), suffixes, strict=True):
            out.update({name.replace("{key}", key): kind for name in names})

    for call in (n for n in ast.walk(model) if isinstance(n, ast.Call)):
        kw = {k.arg: _text(k.value, attrs) for k in call.keywords if k.arg and k.arg.startswith("key")}
        # (SlidingAttention if swa else Attention)(...): either class, one set of keys
        kind = call.func.id if isinstance(call.func, ast.Name) else ast.unparse(call.func.body) \
            if isinstance(call.func, ast.IfExp) else None
        if kind == "RMSNorm":
            out[kw["key"] + ".weight"] = "raw"
        elif kind in ("Attention", "SlidingAttention"):
            out.update({f"{kw['key']}.{kw[k]}": "exl3" for k in ("key_q", "key_k", "key_v", "key_o")})
        elif kind == "GatedMLP":
            out.update({f"{kw['key']}.{kw[k]}": "exl3" for k in ("key_up", "key_gate", "key_down")})
        elif kind == "DFlashInputLayer":
            quantized, _, _ = _module_keys(_source("modules/arch_specific/dflash.py"), "DFlashInputLayer")
            assert quantized == {"{key}"}, "DFlashInputLayer's projection is one quantizable Linear at its key"
            out[kw["key"]] = "exl3"
            out[kw["key_norm"] + ".weight"] = "raw"
        elif kind == "DFlash2DynConv":
            for conv in convs:
                add(kw["key"].replace("{name}", conv), _module_keys(mods, "DFlash2DynConv"))
        elif kind == "DFlash2Selector":
            add(kw["key"], _module_keys(mods, "DFlash2Selector"))
    assert len(out) > 15, "the parse found exllamav3's DFlash2 modules"
    return {name.replace("{idx}", str(i)): kind for name, kind in out.items() for i in range(layers)}


def _required_config_keys() -> set[tuple[str, ...]]:
    """Keys DFlash2Config and DFlashConfig read with no default, each as its spellings (any one will do)."""
    keys = set()
    tree = _source("architecture/dflash.py"), _source("architecture/dflash2.py")
    for module in tree:
        for call in (n for n in ast.walk(module) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                     and n.func.attr == "read_cfg" and len(n.args) == 3):
            if isinstance(call.args[2], ast.Name) and call.args[2].id == "no_default":
                spellings = ast.literal_eval(call.args[1])
                keys.add((spellings,) if isinstance(spellings, str) else tuple(spellings))
    assert any("dflash_config->selector_rank" in k for k in keys) and ("hidden_size",) in keys
    return keys


def _has(config: dict, path: str) -> bool:
    for part in path.split("->"):
        if not isinstance(config, dict) or part not in config:
            return False
        config = config[part]
    return True


def test_the_drafter_holds_every_tensor_exllamav3s_dflash2_loads(drafter_dir):
    info = read_model_info(drafter_dir)
    expected = expected_dflash2_tensors(TINY["num_hidden_layers"])
    names = set()
    for key, kind in expected.items():
        names |= {f"{key}.{p}" for p in ("trellis", "suh", "svh", "mul1")} if kind == "exl3" else \
            {f"{key}.weight"} if kind == "fp16" else {key}
    assert {"fc.trellis", "candidate_selector.predecessor_codebook", "layers.1.mlp_conv.base_kernel",
            "layers.0.attention_conv.kernel_projection.trellis", "hidden_norm.weight", "norm.weight"} <= names
    assert names == set(info.tensors), (sorted(names - set(info.tensors)), sorted(set(info.tensors) - names))


def test_the_shapes_are_those_exllamav3_checks(drafter_dir):
    t = read_model_info(drafter_dir).tensors
    h, dc = TINY["hidden_size"], TINY["dflash_config"]
    assert t["fc.trellis"].shape == (3 * h // 16, h // 16, 64)  # the three taps concatenated -> hidden, 4 bits
    assert t["layers.0.mlp_conv.base_kernel"].shape == (2, dc["conv_kernel_size"], h)  # DFlash2DynConv.load
    assert t["layers.0.mlp_conv.kernel_projection.svh"].shape == (2 * dc["conv_kernel_size"] * h // 16,)
    assert t["candidate_selector.successor_codebook"].shape == (TINY["vocab_size"], dc["selector_rank"])
    assert t["candidate_selector.hidden_projection.weight"].shape == (dc["selector_rank"], h)


def test_the_config_has_every_key_exllamav3_requires_and_is_a_dflash2_drafter(drafter_dir):
    config = json.loads((drafter_dir / "config.json").read_text())
    missing = [spellings for spellings in _required_config_keys() if not any(_has(config, k) for k in spellings)]
    assert not missing
    dflash2 = (installed_surface().root / "architecture" / "dflash2.py").read_text()
    assert f'arch_string = "{config["architectures"][0]}"' in dflash2
    assert installed_surface().architecture("DFlash2DraftModel").is_dflash_drafter
    drafter = read_drafter(drafter_dir)
    assert (drafter.kind, drafter.block_size) == ("dflash", 8)
    assert set(config["layer_types"]) == {"sliding_attention"} and config["is_causal"] is False


def test_the_published_shape_taps_the_27b_where_exllamav3_reads_it():
    """Block of 8 (7 drafts, exllamav3's default_draft_size = block_size - 1), taps 5/19/33/47/61 as layer
    outputs (DFlash2Config.tap_shift 0) of the 64-layer target, the target's width and vocabulary."""
    dc = QWEN38_27B_DFLASH2["dflash_config"]
    assert dc["block_size"] == 8 and dc["target_layer_ids"] == [5, 19, 33, 47, 61]
    assert max(dc["target_layer_ids"]) < QWEN38_27B["num_hidden_layers"]
    source = (installed_surface().root / "architecture" / "dflash2.py").read_text()
    assert "tap_shift = 0" in source and '"default_draft_size": config.block_size - 1' in source
    assert (QWEN38_27B_DFLASH2["hidden_size"], QWEN38_27B_DFLASH2["vocab_size"]) == (
        QWEN38_27B["hidden_size"], QWEN38_27B["vocab_size"])  # attach_to refuses any other


def test_the_writer_is_deterministic_by_seed(tmp_path):
    one = write_dflash2_drafter(tmp_path / "a", TINY, seed=3)
    two = write_dflash2_drafter(tmp_path / "b", TINY, seed=3)
    other = write_dflash2_drafter(tmp_path / "c", TINY, seed=4)
    data = [(d / "model-00001-of-00001.safetensors").read_bytes() for d in (one, two, other)]
    assert data[0] == data[1] != data[2]
    assert "about zero" in json.loads((one / "SYNTHETIC.json").read_text())["acceptance"]


def test_more_draft_tokens_than_one_dflash_pass_makes_are_refused(drafter_dir):
    drafter = read_drafter(drafter_dir)
    check_draft_tokens(drafter, 7)
    check_draft_tokens(drafter, None)
    with pytest.raises(ConfigError, match="num_draft_tokens 8 exceeds .*block_size 8 - 1 = 7"):
        check_draft_tokens(drafter, 8)
