"""benchmarks.overhead rates both sides with bench's one decode formula and refuses runs it cannot rate."""

from __future__ import annotations

import pytest

from bench.records import RequestResult
from benchmarks.overhead import _measured, _rate, _spec


def _server_run(itl_s: tuple[float, ...], tokens: int, **kw) -> RequestResult:
    return RequestResult(spec=_spec(16, tokens), ok=True, started_at_unix_s=0.0, latency_s=1.0, itl_s=itl_s,
                         completion_tokens=tokens, server_decode_s=0.9, **kw)


def test_the_server_side_rate_is_benchs_decode_rate():
    # the first gap (template text or the first token) is left out: 2 tokens over the last two gaps
    result = _measured(_server_run((5.0, 0.5, 0.5), tokens=4))
    assert result.decode_tok_per_s_client == 2.0
    assert _rate([{"tokens": 4, "decode_tok_per_s": 2.0}, {"tokens": 4, "decode_tok_per_s": 4.0}, {"prefill_tokens": 8}]) == 3.0


def test_a_failed_or_unrateable_server_run_is_an_error_not_a_number():
    failed = RequestResult(spec=_spec(16, 4), ok=False, error="HTTP 500: boom", started_at_unix_s=0.0, latency_s=0.1)
    with pytest.raises(RuntimeError, match="HTTP 500"):
        _measured(failed)
    with pytest.raises(RuntimeError, match="fewer than three"):
        _measured(_server_run((0.5,), tokens=2))
    with pytest.raises(RuntimeError, match="fewer than three"):
        _rate([{"tokens": 2, "decode_tok_per_s": None}])
