"""How many answers a configuration holds in flight beside its weights: the memory model's count under a budget."""

import dataclasses

import pytest

from search_space import Budget, Calibration, MemoryModel, answers_in_flight, check_fit, read_model_info
from search_space.errors import SearchSpaceError
from serving.config import ServingConfig

GiB = 1024**3
RTX_3090 = Budget(vram_bytes=24 * GiB)
PROMPT = 1024


def _stock(**args) -> ServingConfig:
    """A configuration whose own cache holds many answers (262,144 tokens): the memory model decides."""
    return ServingConfig.from_dict({"engine": "exllamav3", "args": {"cache_tokens": 262144, **args}})


@pytest.fixture(scope="module")
def big(qwen27b_dir):
    return MemoryModel(read_model_info(qwen27b_dir))


def _fits(memory, config, tokens, n, calibration=None) -> bool:
    with_pages = dataclasses.replace(config, args=dataclasses.replace(config.args, cache_tokens=n * tokens))
    return check_fit(memory.estimate(with_pages), RTX_3090, calibration).fits


def test_a_27b_on_a_3090_holds_fewer_long_thinking_answers_than_the_suite_sends(big):
    fit = answers_in_flight(big, _stock(), RTX_3090, None, tokens_per_answer=PROMPT + 32768, most=8)
    assert 1 <= fit.answers < 8
    assert fit.tokens_per_answer == PROMPT + 32768  # whole pages already
    assert fit.bytes_per_answer == fit.tokens_per_answer * big.kv_bytes_per_token()
    assert _fits(big, _stock(), fit.tokens_per_answer, fit.answers)  # the count is the largest that fits
    assert not _fits(big, _stock(), fit.tokens_per_answer, fit.answers + 1)
    assert f"{fit.answers} of at most 8 fit beside the weights in 24.0 GiB" in fit.describe()


def test_answers_of_8k_tokens_are_capped_by_the_suite_on_a_3090(big):
    """0.53 GiB of cache each: some 14 fit beside the 27B's weights, the suite sends 8 (the shape-true 27B was
    measured at 16 streams under a 24 GiB cap)."""
    assert _fits(big, _stock(), PROMPT + 8192, 12)
    fit = answers_in_flight(big, _stock(), RTX_3090, None, tokens_per_answer=PROMPT + 8192, most=8)
    assert fit.answers == 8


def test_a_quantized_cache_holds_more_answers(big):
    fp16 = answers_in_flight(big, _stock(), RTX_3090, None, tokens_per_answer=PROMPT + 32768, most=16)
    q4 = answers_in_flight(big, _stock(cache_kind="quant", cache_k_bits=4, cache_v_bits=4), RTX_3090, None,
                           tokens_per_answer=PROMPT + 32768, most=16)
    assert q4.bytes_per_answer < fp16.bytes_per_answer / 3 and q4.answers > fp16.answers


def test_a_calibration_that_adds_overhead_leaves_room_for_fewer(big):
    plain = answers_in_flight(big, _stock(), RTX_3090, None, tokens_per_answer=PROMPT + 32768, most=8)
    heavier = answers_in_flight(big, _stock(), RTX_3090, Calibration(overhead_bytes=3 * GiB, observations=1),
                                tokens_per_answer=PROMPT + 32768, most=8)
    assert heavier.answers < plain.answers


def test_a_small_model_holds_the_whole_suite(tiny_exl3_dir):
    fit = answers_in_flight(MemoryModel(read_model_info(tiny_exl3_dir)), _stock(), RTX_3090, None,
                            tokens_per_answer=PROMPT + 8192, most=8)
    assert fit.answers == 8 and fit.most == 8


def test_a_hybrid_model_batches_no_more_than_its_cache_slots(tiny_exl3_dir):
    fit = answers_in_flight(MemoryModel(read_model_info(tiny_exl3_dir)), _stock(cache_slots=4), RTX_3090, None,
                            tokens_per_answer=PROMPT + 4096, most=8)
    assert fit.answers == 4 and fit.most == 4


def test_the_configurations_own_cache_holds_only_so_many_answers(big):
    """exllamav3 reserves a job's pages for its prompt and whole answer budget when it admits it: a 32K cache
    holds 6 answers of 4,096 tokens (and their prompts) at once though 8 fit beside the 27B's weights. Before,
    the count said 8 and the server queued 2 of them."""
    pinned = _stock(cache_tokens=32768)
    fit = answers_in_flight(big, pinned, RTX_3090, None, tokens_per_answer=PROMPT + 4096, most=8)
    assert fit.fitted == 8 and fit.held == 6 and fit.answers == 6
    assert "the configuration's cache of 32768 tokens holds 6 at once" in fit.describe()
    one = answers_in_flight(big, _stock(cache_tokens=4096), RTX_3090, None, tokens_per_answer=PROMPT + 4096, most=8)
    assert one.answers == 1 and one.fitted == 8  # exllamav3 cuts the one answer to the cache's room
    assert "holds one at a time, its answer cut to the cache's room" in one.describe()


def test_an_answer_longer_than_the_budget_holds_leaves_none(big):
    fit = answers_in_flight(big, _stock(), RTX_3090, None, tokens_per_answer=262144, most=8)
    assert fit.answers == 0


def test_only_the_exllamav3_engine_is_sized(tiny_exl3_dir):
    memory = MemoryModel(read_model_info(tiny_exl3_dir))
    with pytest.raises(SearchSpaceError, match="exllamav3"):
        answers_in_flight(memory, ServingConfig.from_dict({"engine": "transformers", "args": {}}), RTX_3090, None,
                          tokens_per_answer=1024, most=8)
