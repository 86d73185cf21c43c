"""The catalog's levers: which single changes a study tries first, for which checkpoint and options."""

from __future__ import annotations

import dataclasses

import pytest

from search_space import EXL3_KNOBS, CatalogError, SpaceContext, build_space, read_model_info
from search_space.surface_check import validate_catalog

CHUNKS = [{"max_chunk_size": 4096}, {"max_chunk_size": 8192}, {"max_chunk_size": 16384}]


def _space(model_dir, draft_dir=None, **kwargs):
    draft = read_model_info(draft_dir) if draft_dir else None
    return build_space(SpaceContext(engine="exllamav3", model=read_model_info(model_dir), draft_model=draft), **kwargs)


def test_a_checkpoint_without_mtp_or_drafter_gets_chunks_ngram_and_suffix_drafting(qwen27b_dir):
    assert list(_space(qwen27b_dir).levers()) == [*CHUNKS, {"draft_mode": "ngram"}, {"hybrid_draft_tokens": 8}]


def test_mtp_weights_and_a_dflash_drafter_add_their_modes(qwen27b_mtp_dir, dflash_dir):
    levers = _space(qwen27b_mtp_dir, dflash_dir).levers()
    assert [v for lever in levers for k, v in lever.items() if k == "draft_mode"] == ["ngram", "mtp", "dflash"]


def test_an_ordinary_draft_model_adds_draft_model_mode(qwen27b_dir, causal_draft_dir):
    levers = _space(qwen27b_dir, causal_draft_dir).levers()
    assert [v for lever in levers for k, v in lever.items() if k == "draft_mode"] == ["ngram", "draft_model"]


def test_pinned_knobs_and_the_baselines_own_value_are_left_out(qwen27b_dir):
    assert {"max_chunk_size": 4096} not in _space(qwen27b_dir).levers({"max_chunk_size": 4096})
    assert not any("max_chunk_size" in lever for lever in _space(qwen27b_dir, pinned={"max_chunk_size": 8192}).levers())


def test_the_cpu_engine_levers_are_its_prefill_chunks(tiny_hf_dir):
    space = build_space(SpaceContext(engine="transformers", model=read_model_info(tiny_hf_dir), cpu_count=2))
    assert list(space.levers()) == [{"prefill_chunk_size": 64}, {"prefill_chunk_size": 128}]


def test_a_lever_outside_its_knobs_domain_is_a_catalog_error():
    chunk = next(k for k in EXL3_KNOBS if k.name == "max_chunk_size")
    with pytest.raises(CatalogError, match="lever 3000"):
        validate_catalog([dataclasses.replace(chunk, levers=(3000,))])
