"""The catalog and the memory model with the synthetic DFlash2 drafter of the shape-true 27B (header-only files).

Random weights: only the drafter's memory and plumbing are the published drafter's (its acceptance is about zero).
"""

import pytest

from search_space import Budget, DoesNotFit, check_fit, parse_bytes, require_fit
from search_space.domains import IntRange
from search_space.knobs import SpaceContext
from search_space.memory import MemoryModel
from search_space.model_info import read_model_info
from search_space.space import build_space
from serving.config import ServingConfig
from serving.synthetic.dflash2 import write_dflash2_drafter
from serving.synthetic.exl3 import write_exl3_checkpoint

GiB = 1024**3
BUDGET = Budget(vram_bytes=parse_bytes("24GiB"))


@pytest.fixture(scope="module")
def q27(tmp_path_factory):
    root = tmp_path_factory.mktemp("q27-dflash2")
    model = read_model_info(write_exl3_checkpoint(root / "q27", mtp_layers=1, sparse=True))
    draft = read_model_info(write_dflash2_drafter(root / "drafter", sparse=True))
    return model, draft


def _config(draft, **args) -> ServingConfig:
    if args.get("draft_mode") == "dflash":
        args["draft_model_dir"] = str(draft.directory)
    return ServingConfig.from_dict({"engine": "exllamav3", "args": args})


def test_the_drafter_opens_dflash_with_at_most_seven_drafts_and_it_is_a_lever(q27):
    model, draft = q27
    space = build_space(SpaceContext(engine="exllamav3", model=model, draft_model=draft))
    assert "dflash" in space.knob("draft_mode").domain.choices
    assert space.knob("num_draft_tokens").domain == IntRange(1, 7)  # block 8: one pass drafts 7
    assert {"draft_mode": "dflash"} in space.levers()
    lever = space.to_config(space.values_with({"draft_mode": "dflash"}))
    assert (lever.args.num_draft_tokens, lever.args.draft_model_dir) == (7, str(draft.directory))
    assert build_space(SpaceContext(engine="exllamav3", model=model)).knob("num_draft_tokens").domain == IntRange(1, 16)


def test_the_drafter_costs_its_weights_and_a_window_ring_per_slot_not_paged_kv(q27):
    model, draft = q27
    memory = MemoryModel(model)
    one, many = (memory.estimate(_config(draft, draft_mode="dflash", num_draft_tokens=7, cache_slots=s))
                 for s in (1, 16))
    ring = 5 * 2 * 2560 * 8 * 128 * 2  # five layers, K and V, 2047 + 512 rounded to pages, 8 KV heads of 128, fp16
    assert many.draft_bytes - one.draft_bytes == 15 * ring
    long = memory.estimate(_config(draft, draft_mode="dflash", num_draft_tokens=7, cache_slots=1, cache_tokens=131072))
    assert long.draft_bytes == one.draft_bytes  # no paged K/V: the cache size does not move the drafter's share
    assert 1.0 * GiB < one.draft_bytes - ring < 1.2 * GiB  # ~1.16 GB of weights (published EXL3 4.00 bpw: ~1.25 GB)


def test_with_a_32k_cache_dflash2_fits_in_24_gib_and_a_full_context_cache_is_refused_with_its_components(q27):
    model, draft = q27
    memory = MemoryModel(model)
    pinned = check_fit(memory.estimate(_config(draft, draft_mode="dflash", num_draft_tokens=7)), BUDGET)
    assert pinned.fits and pinned.excess_bytes < -2 * GiB
    with pytest.raises(DoesNotFit, match=r"exceeds the usable 23.50 GiB.*kv_cache_bytes 16.00 GiB.*draft_bytes 1\.\d\d GiB"):
        require_fit(memory.estimate(_config(draft, draft_mode="dflash", num_draft_tokens=7, cache_tokens=262144)),
                    BUDGET)


def test_the_drafter_costs_cache_capacity_against_no_drafting(q27):
    model, draft = q27
    memory = MemoryModel(model)

    def largest(**args) -> int:
        fitting = [t for t in range(32768, 262145, 4096)
                   if check_fit(memory.estimate(_config(draft, cache_tokens=t, **args)), BUDGET).fits]
        return max(fitting)

    plain, dflash = largest(), largest(draft_mode="dflash", num_draft_tokens=7)
    per_token = memory.kv_bytes_per_token()
    drafter = memory.estimate(_config(draft, draft_mode="dflash", num_draft_tokens=7)).draft_bytes
    assert 0 < plain - dflash <= drafter / per_token + 2 * 4096
