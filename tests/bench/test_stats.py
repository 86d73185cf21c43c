"""bench.stats on hand-checked cases and on timing data recorded from real runs (data/recorded_samples.json)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench.errors import BenchConfigError, MissingMetric
from bench.stats import (
    DifferenceRule,
    NoiseFloor,
    compare,
    compare_one,
    drift_rel,
    is_settled,
    median_ci,
    noise_floor,
    summarize,
)

RECORDED = json.loads((Path(__file__).parent / "data" / "recorded_samples.json").read_text())


def test_median_of_odd_and_even_counts():
    assert summarize([3.0, 1.0, 2.0]).median == 2.0
    assert summarize([4.0, 1.0, 3.0, 2.0]).median == 2.5


def test_three_samples_give_the_full_range_with_its_true_coverage_of_75_percent():
    low, high, level = median_ci([70.4, 69.8, 70.1])
    assert (low, high) == (69.8, 70.4)
    assert level == pytest.approx(0.75)


def test_six_samples_reach_95_percent_with_the_full_range():
    low, high, level = median_ci([1, 2, 3, 4, 5, 6])
    assert (low, high, level) == (1, 6, pytest.approx(1 - 2 / 64))


def test_twenty_samples_use_the_sixth_and_fifteenth_order_statistics():
    # 1 - 2 * P(Bin(20, 1/2) <= 5) = 0.9586 >= 0.95, while j = 7 gives 0.8847
    low, high, level = median_ci(list(range(1, 21)))
    assert (low, high) == (6, 15)
    assert level == pytest.approx(1 - 2 * sum(math.comb(20, i) for i in range(6)) / 2**20)


def test_a_single_sample_has_no_interval_to_speak_of():
    s = summarize([5.0])
    assert (s.ci_low, s.ci_high, s.ci_level) == (5.0, 5.0, 0.0)


def test_summarize_refuses_empty_and_non_finite_samples():
    with pytest.raises(BenchConfigError):
        summarize([])
    with pytest.raises(BenchConfigError):
        summarize([1.0, math.nan])


def test_mad_is_the_median_absolute_deviation():
    assert summarize([1.0, 2.0, 3.0, 4.0, 100.0]).mad == 1.0


def test_settling_needs_both_enough_runs_and_a_tight_interval():
    tight = summarize([100.0, 100.5, 101.0])
    assert is_settled(tight, min_n=3, target_rel_ci=0.01)
    assert not is_settled(tight, min_n=4, target_rel_ci=0.01)
    assert not is_settled(summarize([90.0, 100.0, 110.0]), min_n=3, target_rel_ci=0.05)
    assert not is_settled(None, min_n=1, target_rel_ci=0.5)


def test_drift_compares_the_first_and_second_half():
    assert drift_rel([100, 100, 100]) is None
    assert drift_rel([100, 100, 90, 90]) == pytest.approx(-0.10)
    assert drift_rel([100, 101, 99, 100, 100]) == pytest.approx(0.0, abs=0.011)


def test_three_runs_each_that_all_beat_the_baseline_by_5_percent_are_called_faster():
    c = compare_one("decode", [70.0, 70.2, 69.9], [73.5, 73.6, 73.4])
    assert c.verdict == "faster"
    assert c.ratio == pytest.approx(73.5 / 70.0)
    assert c.ratio_ci_low == pytest.approx(73.4 / 70.2)


def test_overlapping_runs_are_the_same_even_with_a_higher_median():
    assert compare_one("decode", [70.0, 71.0, 69.0], [72.0, 70.5, 73.0]).verdict == "same"


def test_a_difference_inside_twice_the_noise_floor_is_the_same():
    base, cand = [70.0, 70.2, 69.9], [73.5, 73.6, 73.4]  # +5 %
    assert compare_one("m", base, cand, floor_rel=0.02).verdict == "faster"  # margin 4 %
    assert compare_one("m", base, cand, floor_rel=0.03).verdict == "same"  # margin 6 %


def test_min_effect_applies_without_a_noise_floor():
    base, cand = [100.0, 100.1, 100.05], [100.6, 100.7, 100.65]  # +0.6 %, clean separation
    assert compare_one("m", base, cand).verdict == "same"
    assert compare_one("m", base, cand, rule=DifferenceRule(min_effect_rel=0.005)).verdict == "faster"


def test_slower_is_symmetric():
    assert compare_one("m", [73.5, 73.6, 73.4], [70.0, 70.2, 69.9]).verdict == "slower"


def test_rule_parameters_are_checked():
    with pytest.raises(BenchConfigError):
        DifferenceRule(noise_factor=-1)
    with pytest.raises(BenchConfigError):
        DifferenceRule(confidence=1.0)


def test_compare_refuses_metrics_one_side_lacks_and_names_them():
    with pytest.raises(MissingMetric, match=r"b \(candidate has no samples\); c \(baseline has no samples\)"):
        compare({"a": [1.0, 1.0, 1.0], "b": [2.0]}, {"a": [1.0, 1.0, 1.0], "c": [3.0]}, noise_floor=None)
    with pytest.raises(MissingMetric, match="a \\(candidate has no samples"):
        compare({"a": [1.0]}, {"a": []}, noise_floor=None)
    out = compare({"a": [1.0, 1.0, 1.0], "b": [2.0]}, {"a": [1.0, 1.0, 1.0], "c": [3.0]}, noise_floor=None,
                  metrics=["a"])
    assert [c.metric for c in out] == ["a"]


def test_a_noise_floor_without_the_metric_is_not_zero_noise():
    floor = NoiseFloor(rel_diff=(("a", 0.1),))
    with pytest.raises(MissingMetric, match="b \\(the noise floor lacks it\\)"):
        compare({"a": [1.0], "b": [1.0]}, {"a": [1.0], "b": [1.0]}, noise_floor=floor)
    (c,) = compare({"a": [1.0] * 3}, {"a": [1.15] * 3}, noise_floor=floor)
    assert c.margin_rel == pytest.approx(0.2) and c.verdict == "same"  # 15% faster, inside 2 x 10% noise


# ---- recorded data: two launches of one configuration, and one launch of a slower one ----


def test_recorded_launches_of_one_configuration_are_called_the_same():
    a = RECORDED["baseline_launch_1"]["samples"]
    b = RECORDED["baseline_launch_2"]["samples"]
    floor = noise_floor(a, b)
    assert set(dict(floor.rel_diff)) == set(a) & set(b)
    verdicts = {c.metric: c.verdict for c in compare(a, b, noise_floor=floor)}
    assert set(verdicts.values()) == {"same"}, verdicts


def test_recorded_noise_floor_matches_the_medians():
    a = RECORDED["baseline_launch_1"]["samples"]
    b = RECORDED["baseline_launch_2"]["samples"]
    floor = noise_floor(a, b)
    for metric, value in floor.rel_diff:
        expected = abs(summarize(b[metric]).median / summarize(a[metric]).median - 1)
        assert value == pytest.approx(expected)
    assert floor.worst == max(v for _, v in floor.rel_diff)


def test_recorded_bfloat16_candidate_is_slower_at_prefill_and_the_same_at_decode():
    # bf16 matmuls are slow on this CPU (prefill 0.26-0.44x); the tiny model's decode is
    # overhead-bound, and its +2 % sits far inside a shared CPU's 16 % launch-to-launch floor
    a = RECORDED["baseline_launch_1"]["samples"]
    b = RECORDED["baseline_launch_2"]["samples"]
    cand = RECORDED["candidate_bf16"]["samples"]
    floor = noise_floor(a, b)
    verdicts = {c.metric: c.verdict for c in compare(a, cand, noise_floor=floor)}
    assert {m: v for m, v in verdicts.items() if m.startswith("prefill")} == {
        "prefill_tok_per_s_client@256": "slower",
        "prefill_tok_per_s_server@256": "slower",
        "prefill_tok_per_s_client@1024": "slower",
        "prefill_tok_per_s_server@1024": "slower",
    }
    assert verdicts["decode_tok_per_s_client@256/math"] == "same"
    assert verdicts["decode_tok_per_s_server@256/math"] == "same"


def test_recorded_within_launch_drift_shows_in_the_decode_runs():
    # the first runs after the prefill ladder were slower in every launch: drift_rel flags it
    for name in ("baseline_launch_1", "baseline_launch_2", "candidate_bf16"):
        runs = RECORDED[name]["samples"]["decode_tok_per_s_client@256/math"]
        assert drift_rel(runs) > 0.05, name
