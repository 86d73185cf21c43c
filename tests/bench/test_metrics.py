"""Metric keys: one writer and one reader of "rate@tokens[/kind]"."""

from __future__ import annotations

import pytest

from bench.errors import BenchConfigError
from bench.metrics import Metric


@pytest.mark.parametrize("text", ["decode_tok_per_s_client@1024/math", "prefill_tok_per_s_server@8192",
                                  "spec_acceptance@1024/rg-logic", "decode_tok_per_s_server@128/mmath-aime2025"])
def test_a_key_parses_and_writes_back_unchanged(text):
    assert str(Metric.parse(text)) == text


def test_the_parts_are_typed_and_name_their_ladder_point():
    m = Metric.parse("decode_tok_per_s_client@1024/rg-math")
    assert (m.rate, m.tokens, m.kind, m.is_decode, m.client_timed) == ("decode_tok_per_s_client", 1024, "rg-math",
                                                                        True, True)
    assert m.point == "decode@1024/rg-math"
    assert Metric.parse("prefill_tok_per_s_server@8192").point == "prefill@8192"


@pytest.mark.parametrize("text", ["decode_tok_per_s_client@1024", "prefill_tok_per_s_server@8192/math",
                                  "speed@1024/math", "decode_tok_per_s_client@x/math", "decode@1024/math"])
def test_malformed_keys_are_refused(text):
    with pytest.raises(BenchConfigError):
        Metric.parse(text)
