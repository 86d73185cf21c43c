"""bench.prompts: unique from the first token, natural, reproducible, sized by the server's count."""

from __future__ import annotations

import pytest

from bench.corpus import KINDS, load_corpus
from bench.errors import BenchConfigError
from bench.prompts import PromptSource, TokenScale


def test_every_prompt_of_a_run_differs_from_the_first_characters():
    source = PromptSource(salt="ab12")
    prompts = [source.prefill(4000, serial) for serial in range(1, 41)]
    serials = iter(range(41, 101))  # the ladder numbers every request of a run once
    prompts += [source.decode(kind, 4000, next(serials)) for kind in KINDS for _ in range(20)]
    heads = {p.text[:24] for p in prompts}
    assert len(heads) == len(prompts)
    assert len({p.sha256 for p in prompts}) == len(prompts)


def test_two_runs_with_different_salts_never_share_a_prompt_start():
    a, b = PromptSource(salt="run1"), PromptSource(salt="run2")
    assert a.prefill(2000, 1).text[:20] != b.prefill(2000, 1).text[:20]


def test_prompts_are_reproducible_from_salt_and_serial():
    assert (
        PromptSource(salt="x").decode("code", 3000, 7).text
        == PromptSource(salt="x").decode("code", 3000, 7).text
    )


@pytest.mark.parametrize("chars", [500, 4000, 40_000, 400_000])
def test_prompts_have_about_the_asked_size(chars):
    source = PromptSource(salt="s")
    for prompt in (source.prefill(chars, 3), source.decode("math", chars, 4)):
        assert chars * 0.97 <= prompt.chars <= chars * 1.01 or prompt.chars < 1000


def test_decode_prompts_are_real_problems_of_their_kind_ending_with_an_open_one():
    corpus = load_corpus()
    source = PromptSource(salt="s")
    for kind in KINDS:
        text = source.decode(kind, 6000, 5).text
        texts = [item.text for item in corpus[kind]]
        assert sum(t in text for t in texts) >= 2, kind  # worked examples plus the open problem
        last = text.rsplit("Now the last problem.", 1)[1]
        assert any(t in last for t in texts)


def test_prefill_study_sets_mix_all_kinds():
    text = PromptSource(salt="s").prefill(20_000, 9).text
    assert "Mathematics:" in text and "Python:" in text and "Multiple choice:" in text


def test_corpus_is_large_enough_for_32k_token_prompts_without_repeating():
    total = sum(len(item.text) + len(item.answer) for items in load_corpus().values() for item in items)
    assert total > 32_768 * 4 * 2  # twice 32K tokens at a generous 4 characters per token


def test_token_scale_fits_overhead_and_density_from_two_probes():
    scale = TokenScale.from_probes((200, 70), (4000, 1020))  # 4 chars/token, 20 tokens of template
    assert scale.chars_per_token == pytest.approx(4.0)
    assert scale.overhead_tokens == pytest.approx(20.0)
    assert scale.chars_for(1020) == 4000


def test_token_scale_refits_density_from_pooled_observations():
    scale = TokenScale(overhead_tokens=20, chars_per_token=4.0)
    pooled = scale.refined([(3000, 1020), (5000, 1020)])  # 3 and 5 chars/token: pooled 4
    assert pooled.chars_per_token == pytest.approx(4.0)
    assert pooled.overhead_tokens == 20


def test_probes_that_do_not_grow_are_refused():
    with pytest.raises(BenchConfigError, match="grow"):
        TokenScale.from_probes((200, 70), (4000, 70))


def test_bad_salt_or_kind_is_refused():
    with pytest.raises(BenchConfigError):
        PromptSource(salt="two words")
    with pytest.raises(BenchConfigError, match="unknown prompt kind"):
        PromptSource(salt="s").decode("poetry", 100, 1)
