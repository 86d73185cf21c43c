"""Speculative decoding in the search space: which drafting modes apply, their draft checkpoints, their VRAM.

Each condition is exllamav3's own answer, read from the installed source: whether the checkpoint's
architecture registers an MTP component, and whether a user's draft checkpoint is a DFlash drafter
or an ordinary causal LM.
"""

import json
import shutil

import pytest

from search_space.errors import SpaceError
from search_space.knobs import SpaceContext
from search_space.memory import FP16, MemoryModel
from search_space.model_info import read_model_info
from search_space.space import build_space
from serving.config import ServingConfig
from serving.drafter import draft_kind
from serving.exl3_surface import installed_surface, read_surface
from tests.search_space.search_space_checkpoints import (
    QWEN38_27B,
    QWEN_TOKENS,
    qwen35_config,
    qwen35_exl3_schema,
    write_checkpoint,
)


def _space(model_dir, draft_dir=None, **kwargs):
    draft = read_model_info(draft_dir) if draft_dir else None
    return build_space(SpaceContext(engine="exllamav3", model=read_model_info(model_dir), draft_model=draft,
                                    cpu_count=2), **kwargs)


def _modes(space):
    return set(space.knob("draft_mode").domain.choices)


def _config(space, **overrides):
    return space.to_config(space.walk(lambda knob, _: overrides.get(knob.name, knob.default)))


# --- which modes apply --------------------------------------------------------------------------------

def test_ngram_and_the_hybrid_suffix_apply_to_every_model(qwen27b_dir, dense_exl3_dir):
    for model_dir in (qwen27b_dir, dense_exl3_dir):
        space = _space(model_dir)
        assert _modes(space) == {"none", "ngram"}
        assert space.knob("hybrid_draft_tokens").applies_when == ()  # on top of any mode, or none


def test_mtp_applies_only_with_mtp_weights_exllamav3_registers(qwen27b_mtp_dir, tmp_path):
    assert "mtp" in _modes(_space(qwen27b_mtp_dir))
    # MTP tensors in a text-only Qwen3_5ForCausalLM checkpoint: exllamav3's Qwen3_5Config has no mtp component
    text_only = write_checkpoint(tmp_path / "text_only_mtp", qwen35_config(QWEN38_27B, mtp_layers=1),
                                 qwen35_exl3_schema(QWEN38_27B, mtp_layers=1), tokens=QWEN_TOKENS)
    assert read_model_info(text_only).has_mtp_weights
    assert installed_surface().architecture("Qwen3_5ForCausalLM").has_mtp_component is False
    assert "mtp" not in _modes(_space(text_only))


def test_a_dflash_drafter_offers_dflash_and_not_draft_model(qwen27b_mtp_dir, dflash_dir):
    space = _space(qwen27b_mtp_dir, dflash_dir)
    assert _modes(space) == {"none", "ngram", "mtp", "dflash"}
    assert space.context.draft_kind == "dflash"


def test_a_causal_lm_drafter_offers_draft_model_and_not_dflash(qwen27b_dir, causal_draft_dir):
    space = _space(qwen27b_dir, causal_draft_dir)
    assert _modes(space) == {"none", "ngram", "draft_model"}
    config = _config(space, draft_mode="draft_model")
    assert config.args.draft_mode == "draft_model" and config.args.draft_model_dir == str(causal_draft_dir)
    assert config.args.num_draft_tokens is None and config.args.max_history == 4  # exllamav3 drafts 4 by default


def test_drafter_knobs_follow_the_mode(qwen27b_mtp_dir, causal_draft_dir, dflash_dir):
    space = _space(qwen27b_mtp_dir, causal_draft_dir)
    ctx = space.context
    dynamic, sparse = space.knob("dynamic_draft_tokens"), space.knob("sparse_draft_head")
    assert dynamic.is_active(ctx, {"draft_mode": "draft_model"})
    assert not dynamic.is_active(ctx, {"draft_mode": "ngram"})  # n-gram drafts adapt on their own
    # the sparse head is a subset of the target's lm_head: only for drafters that borrow it
    assert sparse.is_active(ctx, {"draft_mode": "mtp"})
    assert not sparse.is_active(ctx, {"draft_mode": "draft_model"})
    assert _space(qwen27b_mtp_dir, dflash_dir).knob("sparse_draft_head").is_active(ctx, {"draft_mode": "dflash"})


def test_every_drafting_condition_says_when_it_applies():
    from search_space.catalog import EXL3_KNOBS

    knob = next(k for k in EXL3_KNOBS if k.name == "draft_mode")
    described = {choice: when.description for choice, when in knob.choice_requires}
    assert set(described) == {"mtp", "dflash", "draft_model"}  # none and ngram always apply
    assert "MTP weights" in described["mtp"] and "exllamav3" in described["mtp"]
    assert "DFlash" in described["dflash"] and "causal LM" in described["draft_model"]


# --- the drafter's kind is exllamav3's, read from its source ----------------------------------------------

def test_the_draft_kind_comes_from_exllamav3s_architecture_table(tmp_path):
    assert draft_kind("DFlashDraftModel") == "dflash"
    assert draft_kind("DFlash2DraftModel") == "dflash"  # a subclass config with its own arch_string
    assert draft_kind("Qwen2ForCausalLM") == "draft_model"
    assert draft_kind("Qwen3_5ForConditionalGeneration") == "draft_model"
    # the same name classifies differently when the installed source says otherwise
    copy = tmp_path / "exllamav3"
    shutil.copytree(installed_surface().root, copy, ignore=shutil.ignore_patterns("*.so", "__pycache__", "exllamav3_ext"))
    path = copy / "architecture" / "dflash.py"
    path.write_text(path.read_text().replace('"dflash_draft": True', '"dflash_draft": False')
                    .replace('"attach_target": True', '"attach_target": False'))
    assert draft_kind("DFlashDraftModel", read_surface(copy, version="patched")) == "draft_model"


def test_unknown_and_assistant_architectures_are_refused_as_drafters(qwen27b_dir, tmp_path):
    from serving.errors import ConfigError

    with pytest.raises(ConfigError, match="does not know the architecture 'NoSuchForCausalLM'"):
        draft_kind("NoSuchForCausalLM")
    with pytest.raises(ConfigError, match="attached assistant"):
        draft_kind("Gemma4AssistantForCausalLM")
    odd = write_checkpoint(tmp_path / "odd", {**qwen35_config(QWEN38_27B), "architectures": ["NoSuchForCausalLM"]},
                           qwen35_exl3_schema(QWEN38_27B), tokens=QWEN_TOKENS)
    with pytest.raises(SpaceError, match="NoSuchForCausalLM"):
        _space(qwen27b_dir, odd)


# --- same vocabulary -------------------------------------------------------------------------------------

def test_a_drafter_with_another_tokenizer_is_refused_naming_a_token(qwen27b_dir, foreign_tokenizer_draft_dir):
    with pytest.raises(SpaceError, match="another tokenizer.*'Ġworld'"):
        _space(qwen27b_dir, foreign_tokenizer_draft_dir)


def test_a_drafter_with_another_vocab_size_is_refused(qwen27b_dir, tmp_path):
    config = qwen35_config(QWEN38_27B)
    draft = write_checkpoint(tmp_path / "padded", {**config, "vocab_size": 248576}, qwen35_exl3_schema(QWEN38_27B),
                             tokens=QWEN_TOKENS)
    with pytest.raises(SpaceError, match="vocab_size 248576, the model 248320"):
        _space(qwen27b_dir, draft)


def test_a_causal_drafter_without_a_tokenizer_cannot_be_checked_and_is_refused(qwen27b_dir, tmp_path, causal_draft_dir):
    bare = tmp_path / "bare"
    shutil.copytree(causal_draft_dir, bare)
    (bare / "tokenizer.json").unlink()
    with pytest.raises(SpaceError, match="cannot read .*tokenizer.json"):
        _space(qwen27b_dir, bare)


# --- memory: the feasibility check sees the draft model ---------------------------------------------------

def test_a_draft_model_adds_its_weights_kv_cache_and_recurrent_state(qwen27b_dir, causal_draft_dir):
    target, draft = read_model_info(qwen27b_dir), read_model_info(causal_draft_dir)
    memory = MemoryModel(target, draft)
    plain = memory.estimate(ServingConfig.from_dict({"engine": "exllamav3", "args": {"cache_slots": 2}}))
    drafted = memory.estimate(ServingConfig.from_dict({"engine": "exllamav3", "args": {
        "cache_slots": 2, "draft_mode": "draft_model", "draft_model_dir": str(causal_draft_dir)}}))
    # the drafter's unquantized embedding stays in system RAM, as the target's does; its own loader
    # lays out its text weights (own slabs) and its GDN layers keep their own graph statics
    drafter = MemoryModel(draft)
    weights = drafter.loaded_weight_bytes({}) + drafter.graph_statics_bytes({})
    assert draft.weight_bytes("text") <= drafter.loaded_weight_bytes({}) < draft.weight_bytes("text") + 128 * 2**20
    assert drafter.graph_statics_bytes({}) > 0
    kv = 32768 * 1 * 2 * 2 * 256 * FP16  # 1 attention layer x K,V x 2 KV heads x head_dim 256, fp16
    # 3 GDN layers per slot: state rows, conv ring and staging over max_history 4 (exllamav3 drafts 4)
    per_slot = MemoryModel(draft).recurrent_bytes_per_slot(max_history=4)
    assert per_slot > 0
    assert drafted.draft_bytes == weights + kv + 2 * per_slot
    assert drafted.weights_bytes == plain.weights_bytes
    assert drafted.workspace_bytes == plain.workspace_bytes  # the target's chunk transients are the larger
    # the target's own recurrent state grows too: max_history 4 adds staging rows for the verified drafts
    target_slot = memory.recurrent_bytes_per_slot(max_history=4)
    assert drafted.peak_bytes - plain.peak_bytes == drafted.draft_bytes + 2 * (target_slot - memory.recurrent_bytes_per_slot())


def test_the_draft_model_is_read_from_the_configs_directory_when_not_given(qwen27b_dir, causal_draft_dir):
    config = ServingConfig.from_dict({"engine": "exllamav3", "args": {
        "draft_mode": "draft_model", "draft_model_dir": str(causal_draft_dir)}})
    target = read_model_info(qwen27b_dir)
    given = MemoryModel(target, read_model_info(causal_draft_dir)).estimate(config)
    assert MemoryModel(target).estimate(config) == given  # as autoresearch's trial builds it


def test_a_draft_model_can_make_a_configuration_infeasible(qwen27b_dir, causal_draft_dir):
    from search_space.budget import Budget, check_fit

    memory = MemoryModel(read_model_info(qwen27b_dir), read_model_info(causal_draft_dir))
    base = {"cache_slots": 1, "cache_tokens": 131072}
    plain = memory.estimate(ServingConfig.from_dict({"engine": "exllamav3", "args": base}))
    drafted = memory.estimate(ServingConfig.from_dict({"engine": "exllamav3", "args": {
        **base, "draft_mode": "draft_model", "draft_model_dir": str(causal_draft_dir)}}))
    reserve = Budget(vram_bytes=2**40).reserve_bytes
    budget = Budget(vram_bytes=check_fit(plain, Budget(vram_bytes=2**40)).predicted_peak_bytes + reserve)
    assert check_fit(plain, budget).fits
    assert not check_fit(drafted, budget).fits


def test_the_draft_models_sizes_come_from_its_own_headers(causal_draft_dir):
    info = read_model_info(causal_draft_dir)
    assert info.architecture == "Qwen3_5ForCausalLM" and info.vocab_size == 248320
    assert json.loads((causal_draft_dir / "config.json").read_text())["hidden_size"] == 1024
