"""The one rule that calls a configuration faster (autoresearch.measures.faster), decision by decision: the launch is
the unit, the spread is pooled from every launch of the reference, the interval narrows as launches are added, a
speed-up under the minimum is not crowned however sure, a point slower beyond the tolerance vetoes, and the claims
of a round are one family."""

from __future__ import annotations

import math

import pytest

from autoresearch.measures.faster import FASTER, RULE, SLOWER, VerdictRule, judge_speed
from autoresearch.measures.finalist_round import sequential_round
from autoresearch.measures.launch_stats import Reading, VerdictError, pooled_spread
from autoresearch.measures.student_t import t_ppf, t_sf

# launch-to-launch wobble of a steady machine, as irregular as real launches (no two alike)
WOBBLE = (1.000, 1.013, 0.991, 1.007, 0.996, 1.011, 0.989, 1.004)


def launches(cost: float, n: int, *, points: dict[str, float] | None = None, scale: float = 1.0,
             start: int = 0) -> list[Reading]:
    """n launches of one configuration: its cost and point rates, each launch off by WOBBLE (x scale)."""
    out = []
    for i in range(start, start + n):
        w = 1 + (WOBBLE[i % len(WOBBLE)] - 1) * scale
        out.append(Reading(cost=cost * w, points={k: v / w for k, v in (points or {"decode": 100.0}).items()}))
    return out


def test_students_t_matches_its_tables():
    for q, df, table in ((0.975, 1, 12.706), (0.975, 4, 2.776), (0.95, 10, 1.812), (0.995, 30, 2.750)):
        assert t_ppf(q, df) == pytest.approx(table, abs=1e-3)
    assert t_sf(2.0, 5) == pytest.approx(0.05097, abs=1e-5) and t_sf(-1.0, 3) == pytest.approx(1 - 0.19550, abs=1e-5)


def test_the_interval_narrows_as_launches_are_added():
    """The launches' range never narrows (before: every candidate launch had to beat every baseline launch); a t
    interval on the launches' logs does, as 1 / sqrt(n)."""
    widths = []
    for n in (2, 4, 8):
        v = judge_speed(launches(10.0, n), launches(9.0, n, start=3))
        widths.append(math.log(v.high / v.low))
    assert widths[0] > widths[1] > widths[2]
    assert widths[2] < widths[0] / 2


def test_the_spread_is_pooled_from_every_launch_of_the_reference_the_study_holds():
    """Two launches a side are one draw of the spread; the baseline's earlier launches (its search launches, drift
    readings, earlier rounds) pool it, and the same two launches are then judged more surely."""
    ref, cand = launches(10.0, 2), launches(9.6, 2, start=4)
    alone = judge_speed(ref, cand)
    pooled = judge_speed(ref, cand, history=launches(10.0, 6, start=2))
    assert pooled.df > alone.df and pooled.history == 6
    assert math.log(pooled.high / pooled.low) < math.log(alone.high / alone.low)
    assert not alone.faster and pooled.faster  # 1.04x: not shown with 2 df, shown with 8


def test_pooled_spread_is_the_within_configuration_variance():
    s = pooled_spread([[0.0, 0.2], [1.0, 1.2, 1.4], [5.0]])
    assert s.df == 3 and s.var == pytest.approx((0.02 + 0.08) / 3)
    assert math.isnan(pooled_spread([[1.0], [2.0]]).var) and pooled_spread([[1.0], [2.0]]).df == 0


def test_a_speed_up_under_the_minimum_is_not_crowned_however_sure():
    ref, history = launches(10.0, 8, scale=0.01), launches(10.0, 8, scale=0.01, start=1)
    sure_but_small = judge_speed(ref, launches(10.0 / 1.015, 8, scale=0.01, start=2), history=history)
    assert sure_but_small.low > 1.0 and not sure_but_small.faster  # shown above 1, not above the rule's 1.02
    worth_it = judge_speed(ref, launches(10.0 / 1.04, 8, scale=0.01, start=2), history=history)
    assert worth_it.faster and worth_it.low > RULE.min_speedup
    assert judge_speed(ref, launches(10.0 / 1.015, 8, scale=0.01, start=2), history=history,
                       rule=VerdictRule(min_speedup=1.01)).faster  # the minimum is the user's to set


def test_a_point_slower_beyond_the_tolerance_vetoes_a_request_time_win():
    base = {"decode": 100.0, "prefill": 1000.0}
    ref = launches(10.0, 5, points=base)
    win = launches(7.0, 5, points={"decode": 92.0, "prefill": 2500.0}, start=3)  # decode 8% slower
    v = judge_speed(ref, win, history=launches(10.0, 4, points=base, start=5))
    assert v.verdict == "slower" and v.slower_on == ("decode",) and v.speedup > 1.3
    assert "slower beyond 3% on decode" in v.text()
    within = launches(7.0, 5, points={"decode": 98.5, "prefill": 2500.0}, start=3)  # 1.5% slower: tolerated
    ok = judge_speed(ref, within, history=launches(10.0, 4, points=base, start=5))
    assert ok.faster and not ok.slower_on


def test_nothing_measured_is_not_a_speed():
    with pytest.raises(VerdictError, match="nothing measured"):
        judge_speed([], launches(9.0, 2))
    with pytest.raises(VerdictError, match="unmeasured launch does not count"):
        Reading(cost=0.0)
    with pytest.raises(VerdictError, match="unmeasured launch"):
        Reading(cost=1.0, points={"decode": math.nan})
    one_each = judge_speed(launches(10.0, 1), launches(5.0, 1))  # 2x, but no launch-to-launch spread is known
    assert one_each.verdict == "same" and "no launch-to-launch spread known" in one_each.text()


def test_a_removal_is_kept_only_where_shown_slower():
    """The minimization's claim: a removal slower by more than the minimum (or a point beyond the tolerance) keeps
    the change; one inside the noise is taken out."""
    champion = launches(10.0, 4)
    slower = judge_speed(champion, launches(11.0, 4, start=2), claim=SLOWER)
    same = judge_speed(champion, launches(10.1, 4, start=2), claim=SLOWER)
    assert slower.verdict == "slower" and same.verdict == "same"
    # under the "faster" claim nothing is said of slower request time: only a point's veto says "slower"
    assert judge_speed(champion, launches(11.0, 4, start=2), claim=FASTER).verdict == "same"


def test_the_claims_of_a_round_are_one_family():
    """A finalist shown faster alone at alpha is not crowned beside a second finalist: each holds alpha / 2."""
    rule = VerdictRule(looks=(3,))
    ref = launches(10.0, 3, scale=3.0)
    cand = launches(10.0 / 1.075, 3, scale=3.0, start=4)
    alone = judge_speed(ref, cand, rule=rule)
    assert alone.faster and alone.level == pytest.approx(0.05)
    draws = {"baseline": ref, "A": cand, "B": launches(10.0, 3, scale=3.0, start=2)}
    pair = sequential_round(lambda name, i: draws[name][i], ["A", "B"], rule=rule)
    assert not pair.verdicts["A"].faster and pair.verdicts["A"].level == pytest.approx(0.025)


def test_launches_are_added_until_the_verdicts_are_decisive():
    """A clear winner stops at the first look; one in doubt is launched again at each look up to the rule's most,
    and the round launches the baseline for as long as any finalist is open."""
    draws = {"baseline": launches(10.0, 8), "clear": launches(5.0, 8, points={"decode": 200.0}, start=1),
             "doubt": launches(9.9, 8, start=2)}
    done = sequential_round(lambda name, i: draws[name][i], ["clear", "doubt"])
    assert done.verdicts["clear"].faster and done.verdicts["clear"].launches[1] == RULE.min_launches
    assert done.verdicts["doubt"].verdict == "same" and len(done.launches["doubt"]) > RULE.min_launches
    assert len(done.launches["baseline"]) == len(done.launches["doubt"]) == done.sets


def test_a_round_stops_where_the_clocks_time_runs_out_and_still_looks_there():
    draws = {"baseline": launches(10.0, 8), "doubt": launches(9.9, 8, start=2)}
    asked: list[int] = []

    def budget(k: int) -> bool:
        asked.append(k)
        return len(asked) < 2  # one more set fits, then none
    result = sequential_round(lambda name, i: draws[name][i], ["doubt"], may_continue=budget)
    assert asked == [2, 2] and result.sets == RULE.min_launches + 1 and result.stopped == "the stage's time ran out"
    assert result.verdicts["doubt"].looks == 2  # the first look, and one where it stopped (not a planned look)


def test_looks_grow_by_half_from_the_first_to_the_most():
    assert VerdictRule.between(2, 8).looks == (2, 3, 5, 8)
    assert VerdictRule.between(3, 3).looks == (3,)
    assert RULE.with_most(5).looks == (2, 3, 5)
    assert sum(RULE.spent(n) - RULE.spent(p) for p, n in zip((0, 2, 3, 5), (2, 3, 5, 8), strict=True)) == \
        pytest.approx(RULE.alpha)
    with pytest.raises(VerdictError, match="two launches"):
        VerdictRule.between(1, 8)
