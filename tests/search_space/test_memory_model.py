"""The memory model against exllamav3's allocations and the figures measured on the GPU machine.

Measured (device/README.md, 2026-11-29), shape-true Qwen3.8-27B at 4.0 bpw, stock exllamav3 1.6.5,
batch 1: allocated after load with a 32K-token cache 15.0 GiB (fp16), 14.0 GiB (8/8 bits),
13.5 GiB (4/4 bits); peak 15.7 GiB at chunk 4096 and 16.2 GiB at chunk 8192 (fp16 cache).

Measured again allocation by allocation (.ci/gpu/memory_probe.py, H200, 2026-12-01; the JSON is
examples/real-0.5b-workload/mtp-27b/memory-probe.json), the published multimodal layout with its MTP
layer, as the server loads it: the figures in PROBE below.

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
MiB = 1024**2
KiB = 1024
# memory_probe.py on the H200: torch's allocated bytes after the server's load and warm-up, and the
# peak of any load step, for the published 27B layout (exllamav3 defaults unless named)
PROBE = {
    "defaults": ({}, 18492327424, 19001935360),
    "cache 8K": ({"cache_tokens": 8192}, 16881714688, 17391322624),
    "chunk 512": ({"max_chunk_size": 512}, 18492327424, 18771248640),
    "mtp 1": ({"draft_mode": "mtp", "num_draft_tokens": 1}, 18871596032, 19381201408),
}
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
    plain = memory.estimate(ServingConfig.from_dict({"engine": "exllamav3", "env": {"EXL3_LOAD_ARENA": "0"}}))
    assert plain.weights_bytes == info.total_bytes - info.weight_bytes("embedding")
    assert plain.weights_bytes / GiB == pytest.approx(12.28, abs=0.01)


def test_weights_are_laid_out_as_the_loader_allocated_them_on_the_gpu(memory):
    """The probe: 257 tensors over 16 MiB allocated alone (10749.4 MiB), the rest in 15 slabs of 128 MiB."""
    assert memory.weights_bytes == int(10749.375 * MiB) + 15 * 128 * MiB
    assert memory.estimate(_config()).weights_bytes == memory.weights_bytes


def test_gdn_graph_statics_are_the_merged_ba_projection_and_the_qkvz_carrier(memory):
    """The probe: 45.0 MiB of merged b/a projections and 384 MiB of fp32 carriers over the 48 GDN layers."""
    ba = 2 * 48 * 5120 * 2  # (2 x 48 value heads, hidden) fp16
    carrier = (10240 + 6144) * 8 * 16 * 4  # (qkv + z width) x MAX_BSZ x MAX_QLEN rows, fp32
    assert 48 * ba == 45 * MiB and 48 * carrier == 384 * MiB
    assert memory.graph_statics_bytes({}) == 48 * (ba + carrier)
    assert memory.graph_statics_bytes({"EXL3_BC_GDN": "0"}) == 0  # no graph path, no statics
    assert memory.graph_statics_bytes({"EXL3_QKV_SLICE": "0"}) == 48 * ba  # no sliced bundle
    # a bundle as wide as the N threshold is unfused at 4 bits (below the int8 GEMV's K threshold)
    assert memory.graph_statics_bytes({"EXL3_MGEMM_N_THRESHOLD": "2048"}) == 48 * ba
    assert memory.graph_statics_bytes({"EXL3_INT8_GEMV": "0", "EXL3_MGEMM_N_THRESHOLD": "2048"}) == 48 * (ba + carrier)
    assert memory.estimate(_config()).graph_statics_bytes == 48 * (ba + carrier)


@pytest.mark.parametrize("name", list(PROBE))
def test_the_published_layout_is_predicted_within_a_quarter_gib_of_the_probe(qwen27b_mtp_dir, name):
    """Issue #13's bar: within 0.25 GiB. What remains is scratch the decode paths keep after warm-up
    (about 0.1 GiB in the probe), which the model leaves out: it under-predicts, never over."""
    args, resident, peak = PROBE[name]
    estimate = MemoryModel(read_model_info(qwen27b_mtp_dir)).estimate(_config(**args))
    assert 0 <= resident - estimate.resident_bytes <= 0.15 * GiB
    assert abs(peak - estimate.peak_bytes) <= 0.25 * GiB


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
    # the MTP head loads through the target's loader: its large tensors alone, its small ones into the
    # target's slabs (whose tails hold them here: the probe saw 15 slabs with MTP as without)
    mtp_large = sum(t.nbytes for n, t in info.tensors.items() if n.startswith("mtp.") and t.nbytes > 16 * MiB)
    assert mtp.draft_bytes == mtp_large + one_layer_cache + 16384 * 5120 * 2
    assert memory.mtp_weights_bytes == mtp_large
    assert mtp.weights_bytes == plain.weights_bytes  # vision tensors are never loaded
    assert mtp.workspace_bytes - plain.workspace_bytes == 2048 * 5120 * 2  # exported final states


def test_dflash_drafting_adds_the_draft_checkpoint_its_cache_and_tapped_states(qwen27b_dir, dflash_dir):
    draft = read_model_info(dflash_dir)
    memory = MemoryModel(read_model_info(qwen27b_dir), draft)
    config = ServingConfig.from_dict({"engine": "exllamav3", "args": {
        "cache_slots": 1, "draft_mode": "dflash", "draft_model_dir": str(dflash_dir)}})
    plain = memory.estimate(_config(cache_slots=1))
    dflash = memory.estimate(config)
    # its own loader: its large tensors alone, its small ones in whole slabs of its own
    large = sum(t.nbytes for t in draft.tensors.values() if t.nbytes > 16 * MiB)
    small = sum(-(-t.nbytes // 256) * 256 for t in draft.tensors.values() if t.nbytes <= 16 * MiB)
    assert dflash.draft_bytes == large + -(-small // (128 * MiB)) * 128 * MiB + 32768 * 8 * 128 * 2 * 2
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
