"""The request-time scalar against hand-computed cases, on bench records built request by request."""

from __future__ import annotations

import json
import math

import pytest

from autoresearch.ground.errors import Unmeasured
from autoresearch.measures.objectives import speedup_score
from autoresearch.measures.request_time import RequestKind, RequestMix, median_headline, prefill_rate_at
from bench import BenchResult, DecodePoint, PrefillPoint, RequestResult, RequestSpec, ServerProfile


def _request(*, purpose: str, prompt_tokens: int, completion_tokens: int, max_tokens: int, ignore_eos: bool,
             ok: bool = True) -> RequestResult:
    spec = RequestSpec(purpose=purpose, point="decode", prompt_kind="math", target_prompt_tokens=prompt_tokens,
                       prompt_chars=4 * prompt_tokens, prompt_sha256="0" * 64, max_tokens=max_tokens,
                       ignore_eos=ignore_eos)
    return RequestResult(spec=spec, ok=ok, started_at_unix_s=0.0, latency_s=1.0, ttft_s=0.1,
                         itl_s=(0.01,) * max(completion_tokens - 1, 0), prompt_tokens=prompt_tokens,
                         completion_tokens=completion_tokens, cached_tokens=0)


def _decode_point(context: int, kind: str, *, prompt: int, answers: list[int], output_tokens: int = 512) -> DecodePoint:
    """A decode point whose warm-ups (sent without ignore_eos) answered in `answers` tokens."""
    warmups = tuple(_request(purpose="warmup", prompt_tokens=prompt, completion_tokens=a, max_tokens=output_tokens,
                             ignore_eos=False) for a in answers)
    runs = tuple(_request(purpose="measure", prompt_tokens=prompt, completion_tokens=output_tokens,
                          max_tokens=output_tokens, ignore_eos=True) for _ in range(3))
    return DecodePoint(context_tokens=context, kind=kind, output_tokens=output_tokens, warmups=warmups, runs=runs,
                       settled=True)


def _bench(decode: tuple[DecodePoint, ...], plan: dict | None = None) -> BenchResult:
    profile = ServerProfile(url="http://127.0.0.1:1", model="m", api="chat", max_model_len=None,
                            accepts_ignore_eos=True, accepts_stream_options=True, reports_cached_tokens=True,
                            reports_timings=True)
    return BenchResult(plan=plan or {}, server=profile, gpu=None, host={}, started_at="", finished_at="", probes=(),
                       prefill=(PrefillPoint(target_tokens=8192, warmups=(), runs=(), settled=True),), decode=decode)


def _rates(prefill: float, decode: float, *, kind: str = "math", context: int = 1024) -> dict[str, float]:
    return {"prefill_tok_per_s_server@8192": prefill, f"decode_tok_per_s_client@{context}/{kind}": decode}


DECODE_HEAVY = RequestMix((RequestKind(kind="math", context_tokens=1024, weight=1.0, prompt_tokens=1000,
                                       answer_tokens=3000),))


def test_request_time_is_prompt_over_prefill_plus_answer_over_decode():
    # 1000 / 1000 + 3000 / 40 = 1 + 75 s
    assert DECODE_HEAVY.time_s(_rates(1000.0, 40.0)) == pytest.approx(76.0)


def test_a_prefill_only_gain_on_a_decode_heavy_workload_ranks_below_a_smaller_decode_gain():
    base = _rates(1000.0, 40.0)
    prefill_2x = _rates(2000.0, 40.0)  # 0.5 + 75 s
    decode_1_1x = _rates(1000.0, 44.0)  # 1 + 68.18 s
    assert DECODE_HEAVY.speedup(base, prefill_2x) == pytest.approx(76.0 / 75.5)
    assert DECODE_HEAVY.speedup(base, decode_1_1x) == pytest.approx(76.0 / (1.0 + 3000.0 / 44.0))
    assert DECODE_HEAVY.speedup(base, decode_1_1x) > DECODE_HEAVY.speedup(base, prefill_2x)
    # the geometric mean it replaces ranked them the other way round
    assert speedup_score((40.0, 2000.0), (40.0, 1000.0)) > speedup_score((44.0, 1000.0), (40.0, 1000.0))


def test_kinds_are_weighted_and_each_uses_its_own_decode_rate():
    mix = RequestMix((RequestKind(kind="math", context_tokens=1024, weight=0.75, prompt_tokens=1000, answer_tokens=200),
                      RequestKind(kind="logic", context_tokens=1024, weight=0.25, prompt_tokens=2000, answer_tokens=10)))
    rates = {"prefill_tok_per_s_server@8192": 1000.0, "decode_tok_per_s_client@1024/math": 100.0,
             "decode_tok_per_s_client@1024/logic": 10.0}
    assert mix.time_s(rates) == pytest.approx(0.75 * (1.0 + 2.0) + 0.25 * (2.0 + 1.0))


def test_the_prefill_rate_is_interpolated_in_log_length_and_held_flat_outside():
    points = {1024: 1000.0, 8192: 4000.0}
    assert prefill_rate_at(math.sqrt(1024 * 8192), points) == pytest.approx(2500.0)  # halfway in log-length
    assert prefill_rate_at(2048, points) == pytest.approx(2000.0)  # a third of the way: 1000 + 3000 / 3
    assert prefill_rate_at(100, points) == 1000.0
    assert prefill_rate_at(32768, points) == 4000.0
    assert prefill_rate_at(5000, {8192: 4000.0}) == 4000.0


def test_the_mix_comes_from_the_baselines_own_prompts_answers_and_workload_shares():
    bench = _bench((_decode_point(1024, "rg-math", prompt=1030, answers=[200, 240, 220]),
                    _decode_point(8192, "rg-math", prompt=8200, answers=[300]),
                    _decode_point(1024, "rg-logic", prompt=1010, answers=[2, 2])),
                   plan={"workload": {"weights": {"rg-math": 0.5, "rg-logic": 0.5}}})
    mix = RequestMix.from_bench(bench)
    assert [(k.kind, k.context_tokens, k.weight, k.prompt_tokens, k.answer_tokens) for k in mix.kinds] == [
        ("rg-math", 1024, 0.25, 1030.0, 220.0), ("rg-math", 8192, 0.25, 8200.0, 300.0),
        ("rg-logic", 1024, 0.5, 1010.0, 2.0)]
    assert mix.assumed == () and mix.describe_assumed() is None
    assert RequestMix.from_dict(json.loads(json.dumps(mix.to_dict()))) == mix
    assert RequestMix.from_record(bench.to_dict()) == mix


def test_unknown_or_unfinished_answers_assume_the_plans_length_and_say_so():
    bench = _bench((_decode_point(1024, "math", prompt=1000, answers=[512, 512], output_tokens=512),
                    _decode_point(1024, "code", prompt=1000, answers=[], output_tokens=256)))
    mix = RequestMix.from_bench(bench)
    assert [k.answer_tokens for k in mix.kinds] == [512.0, 256.0]
    assert [k.kind for k in mix.assumed] == ["math", "code"]
    assert mix.describe_assumed() == (
        "math @1024: 512 tokens (the answers reached the plan's 512-token limit: they are longer); "
        "code @1024: 256 tokens (no answer recorded: a record from before bench kept answers)")


def test_a_rate_the_mix_needs_that_was_not_measured_is_unmeasured_never_a_number():
    with pytest.raises(Unmeasured, match=r"decode_tok_per_s_client@1024/math"):
        DECODE_HEAVY.time_s({"prefill_tok_per_s_server@8192": 1000.0})
    with pytest.raises(Unmeasured, match="a prefill rate"):
        DECODE_HEAVY.time_s({"decode_tok_per_s_client@1024/math": 40.0})
    with pytest.raises(ValueError, match="positive"):
        RequestMix((RequestKind(kind="m", context_tokens=1, weight=1.0, prompt_tokens=0.0, answer_tokens=5.0),))
    with pytest.raises(ValueError, match="positive"):
        RequestMix((RequestKind(kind="m", context_tokens=1, weight=1.0, prompt_tokens=1.0, answer_tokens=-1.0),))
    # a model that answers nothing at a kind: its requests take their prompt's time alone (issue 45: answers too
    # short to time are timed past them, and weighed by their own length)
    mute = RequestMix((RequestKind(kind="m", context_tokens=1024, weight=1.0, prompt_tokens=500.0, answer_tokens=0.0),))
    assert mute.time_s({"prefill_tok_per_s_server@8192": 1000.0, "decode_tok_per_s_client@1024/m": 40.0}) == 0.5


def test_the_median_headline_over_launches_keeps_only_keys_every_launch_measured():
    assert median_headline([{"a": 1.0, "b": 5.0}, {"a": 3.0}]) == {"a": 2.0}
