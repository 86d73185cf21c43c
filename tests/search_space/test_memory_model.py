"""The memory model against exllamav3's allocations and the figures measured on the GPU machine.

Measured (device/README.md, 2026-11-29), shape-true Qwen3.8-27B at 4.0 bpw, stock exllamav3 1.6.5,
batch 1: allocated after load with a 32K-token cache 15.0 GiB (fp16), 14.0 GiB (8/8 bits),
13.5 GiB (4/4 bits); peak 15.7 GiB at chunk 4096 and 16.2 GiB at chunk 8192 (fp16 cache).

ASSUMPTION: the run's recurrent-state slot count is not recorded. We take 1 slot (Cache(max_batch_size=1),
the natural choice for a batch-1 measurement) and check TabbyAPI's 4 as well: both reproduce every
figure within 10%. exllamav3's default of 16 slots adds 2.2 GiB and would not (see the last test here).
"""

import pytest

from search_space.errors import SearchSpaceError
from search_space.memory import MemoryModel
from search_space.model_info import read_model_info
from serving.config import ServingConfig

GiB = 1024**3
KiB = 1024
ASSUMED_SLOTS = (1, 4)


@pytest.fixture(scope="module")
def memory(qwen27b_dir):
    return MemoryModel(read_model_info(qwen27b_dir))


def _config(**args):
    return ServingConfig.from_dict({"engine": "exllamav3", "args": args})


def _quant(bits):
    return {"cache_kind": "quant", "cache_k_bits": bits, "cache_v_bits": bits}


def test_kv_cache_bytes_per_token_follow_exllamav3s_cache_layouts(memory):
    assert memory.kv_bytes_per_token() == 64 * KiB  # 16 layers x 4 heads x 256 x K,V x 2 B
    assert memory.kv_bytes_per_token("quant", 8, 8) == 34 * KiB  # (bits + 0.5) / 8 bytes per element
    assert memory.kv_bytes_per_token("quant", 4, 4) == 18 * KiB
    assert memory.kv_bytes_per_token("quant", 8, 4) == 26 * KiB


def test_recurrent_state_per_slot_follows_gdn_layer_state(memory):
    per_slot = memory.recurrent_bytes_per_slot()
    assert per_slot == pytest.approx(151e6, rel=0.04)  # "≈ 151 MB fp16" per slot (exllamav3-knobs.md)
    state_fp16 = 48 * 2 * 48 * 128 * 128 * 2
    assert memory.recurrent_bytes_per_slot(recurrent_dtype="float") - per_slot == state_fp16
    # a longer history widens the conv ring and the speculative staging rows
    assert memory.recurrent_bytes_per_slot(max_history=4) > per_slot


def test_weights_exclude_the_embedding_that_exllamav3_keeps_in_system_ram(memory, qwen27b_dir):
    info = read_model_info(qwen27b_dir)
    assert memory.weights_bytes == info.total_bytes - info.weight_bytes("embedding")
    assert memory.weights_bytes / GiB == pytest.approx(12.28, abs=0.01)


@pytest.mark.parametrize("slots", ASSUMED_SLOTS)
@pytest.mark.parametrize("cache, measured_gib", [({}, 15.0), (_quant(8), 14.0), (_quant(4), 13.5)],
                         ids=["fp16", "8-8", "4-4"])
def test_allocated_after_load_is_within_10_percent_of_the_gpu_measurement(memory, slots, cache, measured_gib):
    estimate = memory.estimate(_config(cache_tokens=32768, cache_slots=slots, **cache))
    assert estimate.resident_bytes / GiB == pytest.approx(measured_gib, rel=0.10)


@pytest.mark.parametrize("slots", ASSUMED_SLOTS)
@pytest.mark.parametrize("chunk, measured_gib", [(4096, 15.7), (8192, 16.2)])
def test_prefill_peak_is_within_10_percent_of_the_gpu_measurement(memory, slots, chunk, measured_gib):
    estimate = memory.estimate(_config(cache_tokens=32768, cache_slots=slots, max_chunk_size=chunk))
    assert estimate.peak_bytes / GiB == pytest.approx(measured_gib, rel=0.10)


def test_cache_type_differences_match_the_measured_differences(memory):
    fp16 = memory.estimate(_config(cache_slots=1)).resident_bytes
    q8 = memory.estimate(_config(cache_slots=1, **_quant(8))).resident_bytes
    q4 = memory.estimate(_config(cache_slots=1, **_quant(4))).resident_bytes
    assert (fp16 - q8) / GiB == pytest.approx(15.0 - 14.0, abs=0.1)
    assert (fp16 - q4) / GiB == pytest.approx(15.0 - 13.5, abs=0.1)


def test_the_chunk_workspace_grows_as_measured(memory):
    at_4096 = memory.estimate(_config(cache_slots=1, max_chunk_size=4096)).workspace_bytes
    at_8192 = memory.estimate(_config(cache_slots=1, max_chunk_size=8192)).workspace_bytes
    assert (at_8192 - at_4096) / GiB == pytest.approx(16.2 - 15.7, abs=0.1)


def test_a_smaller_gdn_sub_chunk_shrinks_the_scan_workspace(memory):
    config = _config(cache_slots=1, max_chunk_size=4096)
    smaller = ServingConfig.from_dict({**config.to_dict(), "env": {"EXL3_GDN_SUB_CHUNK": "512"}})
    assert memory.estimate(smaller).workspace_bytes < memory.estimate(config).workspace_bytes


def test_quantized_cache_staging_scratch_counts_only_when_staging_is_on(memory):
    quant = _config(cache_slots=1, cache_tokens=262144, max_chunk_size=512, **_quant(4))
    assert memory._qc_staging_bytes(quant.args, {}) == 65536 * 2 * 4 * 256 * 2  # 256 pages cap the window
    assert memory._qc_staging_bytes(quant.args, {"EXL3_QC_STAGING": "0"}) == 0
    assert memory._qc_staging_bytes(_config().args, {}) == 0


def test_mtp_drafting_adds_its_weights_its_cache_and_the_sparse_head(qwen27b_mtp_dir):
    info = read_model_info(qwen27b_mtp_dir)
    memory = MemoryModel(info)
    plain = memory.estimate(_config(cache_slots=1))
    mtp = memory.estimate(_config(cache_slots=1, draft_mode="mtp", sparse_draft_head=16384))
    assert plain.draft_bytes == 0
    one_layer_cache = 32768 * 4 * KiB  # 1 attention layer x fp16 K,V at 4 KiB/token
    assert mtp.draft_bytes == info.weight_bytes("mtp") + one_layer_cache + 16384 * 5120 * 2
    assert mtp.weights_bytes == plain.weights_bytes  # vision tensors are never loaded
    assert mtp.workspace_bytes - plain.workspace_bytes == 2048 * 5120 * 2  # exported final states


def test_dflash_drafting_adds_the_draft_checkpoint_its_cache_and_tapped_states(qwen27b_dir, dflash_dir):
    draft = read_model_info(dflash_dir)
    memory = MemoryModel(read_model_info(qwen27b_dir), draft)
    config = ServingConfig.from_dict({"engine": "exllamav3", "args": {
        "cache_slots": 1, "draft_mode": "dflash", "draft_model_dir": str(dflash_dir)}})
    plain = memory.estimate(_config(cache_slots=1))
    dflash = memory.estimate(config)
    assert dflash.draft_bytes == draft.total_bytes + 32768 * 8 * 128 * 2 * 2
    assert dflash.workspace_bytes - plain.workspace_bytes == 5 * 2048 * 5120 * 2


def test_drafts_the_model_cannot_provide_are_refused(memory):
    with pytest.raises(SearchSpaceError, match="no MTP weights"):
        memory.estimate(_config(draft_mode="mtp"))
    with pytest.raises(SearchSpaceError, match="/somewhere has no config.json"):
        memory.estimate(_config(draft_mode="dflash", draft_model_dir="/somewhere"))
    with pytest.raises(SearchSpaceError, match="not 'transformers'"):
        memory.estimate(ServingConfig.from_dict({"engine": "transformers"}))


def test_a_dense_model_has_no_recurrent_state_and_no_gdn_workspace(dense_exl3_dir):
    memory = MemoryModel(read_model_info(dense_exl3_dir))
    estimate = memory.estimate(_config(cache_slots=16))
    assert estimate.recurrent_state_bytes == 0 and memory.recurrent_bytes_per_slot() == 0


def test_exllamav3s_default_16_slots_would_not_reproduce_the_measurement(memory):
    """Why the 16-slot default is not the assumption: it overshoots the 15.0 GiB figure by more than 10%."""
    estimate = memory.estimate(_config(cache_tokens=32768))
    assert estimate.resident_bytes / GiB > 15.0 * 1.10
