"""The objectives, the speed-up score, dominance and finalist confirmation, on scripted bench results."""

from __future__ import annotations

import dataclasses
import json
import math

import optuna
import pytest

from autoresearch.crown.finalists import finalist_verdict, mean_objectives
from autoresearch.ground.errors import Unmeasured
from autoresearch.ground.ranked_by import GEOMEAN, RANKED_BY
from autoresearch.ground.study import CONSTRAINTS
from autoresearch.measures.faster import judge_speed
from autoresearch.measures.objectives import (
    NOT_MEASURED,
    dominated_by,
    geometric_mean,
    objective_metrics,
    objectives_from_bench,
    speedup_score,
)
from autoresearch.measures.ranking import Ranking
from autoresearch.measures.request_time import RequestKind, RequestMix
from bench import (
    BenchResult,
    DecodePoint,
    PrefillPoint,
    RequestResult,
    RequestSpec,
    ServerProfile,
)

PREFILL_TOKENS = 1000
DECODE_TOKENS = 10


def _spec(point: str, max_tokens: int) -> RequestSpec:
    return RequestSpec(purpose="measure", point=point, prompt_kind="math", target_prompt_tokens=PREFILL_TOKENS,
                       prompt_chars=4000, prompt_sha256="0" * 64, max_tokens=max_tokens, ignore_eos=True)


def _prefill_run(rate: float | None, *, server_timed: bool = True) -> RequestResult:
    """A one-token request prefilling PREFILL_TOKENS at `rate` (server-timed); None: a cache hit."""
    seconds = PREFILL_TOKENS / (rate or 1000.0)
    return RequestResult(spec=_spec("prefill", 1), ok=True, started_at_unix_s=0.0, latency_s=seconds + 0.08,
                         ttft_s=seconds + 0.07, finish_s=seconds + 0.07, prompt_tokens=PREFILL_TOKENS,
                         completion_tokens=1, cached_tokens=0, server_prefill_s=seconds if server_timed else None,
                         invalid_reason=None if rate else "prefix-cache hit: 990 of 1000 prompt tokens cached")


def _decode_run(rate: float | None) -> RequestResult:
    """DECODE_TOKENS tokens, one per chunk, at `rate` tok/s; None: ended short."""
    gap = 1.0 / (rate or 100.0)
    return RequestResult(spec=_spec("decode", DECODE_TOKENS), ok=True, started_at_unix_s=0.0, latency_s=1.0,
                         ttft_s=0.1, finish_s=0.1 + gap * (DECODE_TOKENS - 1), itl_s=(gap,) * (DECODE_TOKENS - 1),
                         text_chunks=DECODE_TOKENS, finish_reason="length", prompt_tokens=PREFILL_TOKENS,
                         completion_tokens=DECODE_TOKENS, cached_tokens=0,
                         invalid_reason=None if rate else "completion of 5 tokens, expected exactly 10")


def _result(prefill: dict[int, list], decode: dict[tuple[int, str], list], *, server_timed: bool = True) -> BenchResult:
    profile = ServerProfile(url="http://127.0.0.1:1", model="m", api="chat", max_model_len=None,
                            accepts_ignore_eos=True, accepts_stream_options=True, reports_cached_tokens=True,
                            reports_timings=server_timed)
    return BenchResult(
        plan={}, server=profile, gpu=None, host={}, started_at="", finished_at="", probes=(),
        prefill=tuple(PrefillPoint(target_tokens=t, warmups=(), settled=True,
                                   runs=tuple(_prefill_run(r, server_timed=server_timed) for r in rates))
                      for t, rates in prefill.items()),
        decode=tuple(DecodePoint(context_tokens=c, kind=k, output_tokens=DECODE_TOKENS, warmups=(), settled=True,
                                 runs=tuple(_decode_run(r) for r in rates))
                     for (c, k), rates in decode.items()),
    )


# ---- objectives ----


def test_the_objectives_are_geometric_means_of_each_points_median():
    result = _result({1024: [4000, 5000, 6000], 8192: [1000, 1000, 1000]},
                     {(1024, "math"): [100, 100, 100], (8192, "math"): [25, 24, 26]})
    decode, prefill = objectives_from_bench(result)
    assert decode == pytest.approx(50.0)
    assert prefill == pytest.approx(math.sqrt(5000 * 1000))
    assert objective_metrics(result) == ["prefill_tok_per_s_server@1024", "prefill_tok_per_s_server@8192",
                                         "decode_tok_per_s_client@1024/math", "decode_tok_per_s_client@8192/math"]


def test_decode_weights_each_kind_as_the_workload_does_and_splits_it_among_contexts():
    result = _result({1024: [1000, 1000, 1000]},
                     {(1024, "rg-math"): [400, 400, 400], (1024, "rg-logic"): [100, 100, 100],
                      (8192, "rg-math"): [400, 400, 400], (8192, "rg-logic"): [100, 100, 100]})
    result = dataclasses.replace(result, plan={"workload": {"weights": {"rg-math": 0.75, "rg-logic": 0.25}}})
    decode, _ = objectives_from_bench(result)
    assert decode == pytest.approx(400 ** 0.75 * 100 ** 0.25)  # not the unweighted 200
    unweighted = dataclasses.replace(result, plan={})
    assert objectives_from_bench(unweighted)[0] == pytest.approx(200.0)


def test_a_point_without_a_valid_run_makes_the_result_unmeasured_never_a_mean_of_the_rest():
    # Measured at 100 and 25 tok/s the candidate scores 50; over its fast point alone it would score 100.
    result = _result({8192: [1000, 1000, 1000]}, {(1024, "math"): [100, 100, 100], (8192, "math"): [None] * 6})
    with pytest.raises(Unmeasured) as exc:
        objectives_from_bench(result)
    assert str(exc.value) == ("decode_tok_per_s_client@8192/math: 0 valid of 6 runs "
                              "(6x completion of 5 tokens, expected exactly 10)")


def test_a_prefill_point_the_server_did_not_time_is_unmeasured_with_that_reason():
    result = _result({8192: [1000, 1000]}, {(1024, "math"): [100, 100]}, server_timed=False)
    with pytest.raises(Unmeasured, match=r"prefill_tok_per_s_server@8192: 2 valid of 2 runs \(the server reported no"):
        objectives_from_bench(result)


def test_a_point_that_ran_no_request_is_unmeasured():
    with pytest.raises(Unmeasured, match=r"decode_tok_per_s_client@1024/math: 0 valid of 0 runs \(no run\)"):
        objectives_from_bench(_result({8192: [1000]}, {(1024, "math"): []}))


def test_geometric_mean_and_speedup_refuse_what_was_not_measured():
    assert geometric_mean([2.0, 8.0]) == pytest.approx(4.0)
    for bad in ([], [0.0, 3.0], [-1.0], [math.nan]):
        with pytest.raises(ValueError):
            geometric_mean(bad)
    assert speedup_score((120.0, 2000.0), (100.0, 2000.0)) == pytest.approx(math.sqrt(1.2))
    for values, base in ((NOT_MEASURED, (1.0, 1.0)), ((1.0, 1.0), (0.0, 1.0)), ((math.inf, 1.0), (1.0, 1.0))):
        with pytest.raises(ValueError, match="needs measured speeds"):
            speedup_score(values, base)


# ---- dominance ----


def _study_with(*trials: tuple[tuple[float, float], bool]) -> optuna.Study:
    study = optuna.create_study(directions=["maximize", "maximize"])
    for values, feasible in trials:
        study.add_trial(optuna.trial.create_trial(
            values=list(values), constraints=dict.fromkeys(CONSTRAINTS, -1.0 if feasible else 1.0)))
    return study


def test_a_point_is_dominated_only_by_a_feasible_trial_faster_on_both_beyond_the_margin():
    study = _study_with(((100.0, 1000.0), True), ((200.0, 3000.0), False), (NOT_MEASURED, False))
    assert dominated_by(study, (90.0, 900.0), margin_rel=0.05) == 0
    assert dominated_by(study, (96.0, 900.0), margin_rel=0.05) is None  # decode within the margin
    assert dominated_by(study, (90.0, 1100.0), margin_rel=0.05) is None  # faster prefill
    assert dominated_by(study, (150.0, 2000.0), margin_rel=0.05) is None  # only an infeasible trial is faster


# ---- finalist confirmation ----


def _launch(decode: list, prefill: list) -> BenchResult:
    return _result({8192: prefill}, {(1024, "math"): decode})


BASE = [_launch([100, 101, 99], [1000, 1010, 990]), _launch([101, 100, 102], [1012, 1005, 995]),
        _launch([99, 99, 100], [990, 1000, 985])]
GEO = Ranking(GEOMEAN, None)  # a study ranked by the geometric mean


def _verdict(base: list[BenchResult], candidate: list[BenchResult], ranking: Ranking) -> dict:
    """What the finalists' stage stores for one finalist: the rule's verdict on the launches' readings."""
    speed = judge_speed([ranking.reading(r) for r in base], [ranking.reading(r) for r in candidate])
    return finalist_verdict(base, candidate, speed, ranking=ranking)


def test_each_objective_over_launches_is_their_geometric_mean_as_the_verdict_takes_it():
    assert mean_objectives([_launch([100] * 3, [1000] * 3), _launch([120] * 3, [3000] * 3)]) == pytest.approx(
        (math.sqrt(100 * 120), math.sqrt(1000 * 3000)))


def test_a_finalist_faster_on_one_point_and_slower_on_none_is_confirmed():
    candidate = [_launch([100, 101, 100], [1300, 1310, 1290]), _launch([101, 100, 100], [1290, 1320, 1300]),
                 _launch([100, 99, 100], [1310, 1300, 1295])]
    verdict = _verdict(BASE, candidate, GEO)
    assert verdict["qualified"] is True and verdict["reason"].startswith("faster: request time 1.14")
    assert verdict["speedup"] == pytest.approx(math.sqrt(1.3), abs=0.01)
    assert verdict["prefill_speedup"] == pytest.approx(1.3, abs=0.01)
    assert json.loads(json.dumps(verdict)) == verdict  # plain data, no reprs
    assert {p["metric"]: p["verdict"] for p in verdict["speed"]["points"]} == {
        "decode_tok_per_s_client@1024/math": "same", "prefill_tok_per_s_server@8192": "same"}


def test_a_finalist_slower_on_a_point_beyond_the_tolerance_is_not_confirmed():
    candidate = [_launch([80, 81, 79], [2000, 2010, 1990]), _launch([81, 80, 80], [1990, 2000, 2010]),
                 _launch([79, 80, 81], [2005, 2000, 1990])]
    verdict = _verdict(BASE, candidate, GEO)
    assert verdict["qualified"] is False and verdict["speed"]["interval"][0] > 1.02  # the gain alone would crown it
    assert verdict["reason"].endswith("; slower beyond 3% on decode_tok_per_s_client@1024/math")


def _mix() -> RequestMix:
    """A decode-heavy workload: 500 prompt tokens, 3000 answer tokens (a thinking model's request)."""
    return RequestMix((RequestKind(kind="math", context_tokens=1024, weight=1.0, prompt_tokens=500,
                                   answer_tokens=3000),))


def test_a_finalist_faster_on_prefill_and_slightly_slower_on_decode_is_not_crowned():
    """Before: qualified point by point (prefill faster, decode 'same' inside its floor) at 0.967x request time."""
    candidate = [_launch([96.25, 96.0, 96.5], [1600] * 3), _launch([96.5, 96.25, 96.0], [1590] * 3),
                 _launch([96.0, 96.25, 96.5], [1610] * 3)]
    verdict = _verdict(BASE, candidate, Ranking(RANKED_BY, _mix()))
    assert verdict["speedup"] < 0.97 and verdict["qualified"] is False
    assert verdict["reason"].startswith("not shown faster: request time 0.96")


def test_a_request_time_gain_inside_the_launch_to_launch_noise_is_not_shown_faster():
    """1.5% faster, with launches that overlap the baseline's (2% apart): not shown faster."""
    base = [_launch([100] * 3, [1000] * 3), _launch([102] * 3, [1020] * 3)]
    candidate = [_launch([101] * 3, [1010] * 3), _launch([104] * 3, [1040] * 3)]
    verdict = _verdict(base, candidate, Ranking(RANKED_BY, _mix()))
    assert verdict["speedup"] > 1 and verdict["qualified"] is False
    low, high = verdict["speed"]["interval"]
    assert low < 1 < high and verdict["reason"].startswith("not shown faster")


def test_a_finalist_without_a_counted_launch_is_not_measured_never_zero():
    verdict = finalist_verdict(BASE, [], None, ranking=GEO, unmeasured=["launch 0: failed: out of memory"])
    assert verdict == {"qualified": False, "speedup": None,
                       "reason": "not measured: no confirmation launch counts (launch 0: failed: out of memory)"}


def test_the_best_so_far_line_never_names_a_candidate_slower_than_the_baseline():
    """Before: 'best so far: trial 1 ... (0.877x)', a Pareto-front candidate slower overall than the baseline."""
    from autoresearch.loop import best_line

    study = optuna.create_study(directions=["maximize", "maximize"])
    ok = dict.fromkeys(CONSTRAINTS, -1.0)
    study.add_trial(optuna.trial.create_trial(values=[100.0, 1000.0], constraints=ok, user_attrs={"role": "baseline"}))
    study.add_trial(optuna.trial.create_trial(values=[70.0, 1100.0], constraints=ok, user_attrs={"role": "candidate"}))
    assert best_line(study) == ("baseline (decode 100.0, prefill 1000 tok/s); no candidate faster yet "
                                "(closest: trial 1 at 0.877x by geometric mean)")  # a study without ranked_by
    study.add_trial(optuna.trial.create_trial(values=[120.0, 1000.0], constraints=ok, user_attrs={"role": "candidate"}))
    assert best_line(study) == "trial 2: decode 120.0, prefill 1000 tok/s (1.095x by geometric mean)"
