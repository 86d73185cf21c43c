"""The removal order and the stop rule of autoresearch.champion.minimize, on scripted measurements.

ScriptedLaunches is a test double for the GPU: it answers each launch from a table keyed by the
settings the launched config lacks (relative to the champion), with a small alternating launch noise.
"""

from __future__ import annotations

import pytest

from autoresearch.champion.changes import changes_of, without
from autoresearch.champion.minimization import BaselineCheck, Minimization
from autoresearch.champion.minimize import Launch, MinimizeError, against_baseline, launch_bound, minimize
from serving.config import ServingConfig

BASELINE = ServingConfig.from_dict({"engine": "exllamav3"})
CHAMPION = ServingConfig.from_dict({"engine": "exllamav3", "args": {
    "draft_mode": "ngram", "ngram_match_min": 3, "num_draft_tokens": 10, "max_chunk_size": 8192,
    "prefill_cooldown": 3, "hybrid_draft_tokens": 4}, "env": {"EXL3_QKV_SLICE": "0"}})


class ScriptedLaunches:
    """Request time per launch: table[frozenset(removed)] (default 1.0 s) times a +-0.02% launch noise."""

    def __init__(self, table: dict[frozenset, float], fail: set[frozenset] = frozenset()):
        self.table, self.fail, self.labels, self.n = table, fail, [], 0

    def __call__(self, config: ServingConfig, label: str) -> Launch | None:
        self.labels.append(label)
        self.n += 1
        removed = frozenset(c.name for c in changes_of(config, CHAMPION))
        if removed in self.fail:
            return None
        t = self.table.get(removed, 1.0) * (1 + 0.0002 * (-1) ** self.n)
        return Launch(request_time_s=t, decode_tok_per_s=100 / t, prefill_tok_per_s=1000.0)


def _drafting_matters() -> dict[frozenset, float]:
    """Drafting is worth 30%, the 8K chunk 5%; the rest are passengers with costs of 0.1-0.3%."""
    def time(removed: frozenset) -> float:
        t = 1.0
        if "draft_mode" in removed:
            t *= 1.3
        if "max_chunk_size" in removed:
            t *= 1.05
        t *= 1 + 0.001 * len(removed & {"prefill_cooldown"}) + 0.002 * len(removed & {"EXL3_QKV_SLICE"}) \
            + 0.003 * len(removed & {"hybrid_draft_tokens"})
        return t
    names = [c.name for c in changes_of(CHAMPION, BASELINE)] + ["ngram_match_min", "num_draft_tokens"]
    from itertools import combinations
    return {frozenset(s): time(frozenset(s)) for r in range(len(names) + 1) for s in combinations(names, r)}


def test_passengers_go_cheapest_first_and_the_changes_that_bought_speed_stay():
    runs = ScriptedLaunches(_drafting_matters())
    result = minimize(CHAMPION, BASELINE, runs, launches=2)
    first_tries = list(dict.fromkeys(a.name for a in result.attempts))
    # ranked by the measured cost of removing each alone: the 0.1% passenger first, drafting last
    passengers = [n for n in first_tries if n in ("prefill_cooldown", "EXL3_QKV_SLICE", "hybrid_draft_tokens")]
    assert passengers == ["prefill_cooldown", "EXL3_QKV_SLICE", "hybrid_draft_tokens"]
    assert first_tries[-2:] == ["max_chunk_size", "draft_mode"]
    assert [a.name for a in result.attempts] == sorted(result.costs, key=lambda n: (-result.costs[n].request[0], n))
    assert set(result.kept) == {"draft_mode", "max_chunk_size"}
    assert result.minimal.args.draft_mode == "ngram" and result.minimal.args.max_chunk_size == 8192
    assert result.minimal.args.prefill_cooldown == 4 and result.minimal.env == {}
    assert result.complete and result.launches <= result.bound == launch_bound(len(result.changes), 2)
    assert result.costs["draft_mode"].verdict == "slower" and result.costs["prefill_cooldown"].verdict == "same"
    assert result.costs["draft_mode"].request_cost == pytest.approx(0.3, abs=0.01)


def test_a_kept_change_is_tried_again_after_a_later_removal_changes_what_it_was_tried_on():
    """A is needed while B is in (its removal is slower then), not once B is out: the stop rule is met only
    when removing any change still in is measured slower on the final configuration."""
    champion = ServingConfig.from_dict({"engine": "exllamav3", "args": {"prefill_cooldown": 3, "max_batch_size": 64},
                                        "env": {"EXL3_QKV_SLICE": "0"}})
    p, a, b = "EXL3_QKV_SLICE", "max_batch_size", "prefill_cooldown"
    table = {frozenset({p}): 1.0, frozenset({a}): 1.03, frozenset({b}): 1.05, frozenset({p, a}): 1.03,
             frozenset({p, b}): 1.0, frozenset({p, a, b}): 1.0}

    n = [0]

    def scripted(config, label):
        n[0] += 1
        removed = frozenset(c.name for c in changes_of(config, champion))
        t = table.get(removed, 1.0) * (1 + 0.001 * (-1) ** n[0])
        return Launch(request_time_s=t, decode_tok_per_s=1 / t, prefill_tok_per_s=1.0)

    result = minimize(champion, BASELINE, scripted, launches=2)
    assert [(x.name, x.accepted) for x in result.attempts] == [(p, True), (a, False), (b, True), (a, True)]
    assert result.kept == () and result.minimal == BASELINE and result.complete


def test_the_bound_stops_it_with_every_accepted_removal_measured_not_slower():
    runs = ScriptedLaunches(_drafting_matters())
    n = len(changes_of(CHAMPION, BASELINE))  # 8: the drafting settings count too
    result = minimize(CHAMPION, BASELINE, runs, launches=2, max_launches=2 * (n + 1) + 2 * 2 * 2)
    assert not result.complete and result.launches == runs.n == result.bound
    assert all(a.cost.verdict != "slower" for a in result.attempts if a.accepted)
    # the round against the baseline keeps its launches under the bound: one attempt, then that round
    assert len(result.attempts) == 1 and result.versus_baseline.faster
    assert [label for label in runs.labels if label.startswith("baseline/")] == \
        ["baseline/baseline/0", "baseline/minimal/0", "baseline/baseline/1", "baseline/minimal/1"]


def test_the_minimal_champion_is_judged_against_the_baseline_and_says_its_own_speed_up():
    result = minimize(CHAMPION, BASELINE, ScriptedLaunches(_drafting_matters()), launches=2)
    check = result.versus_baseline
    assert check.faster and check.cost.request[0] == pytest.approx(1.3 * 1.05, abs=0.002)  # drafting and 8K chunks
    assert check.text().startswith("1.364x [") and "the baseline on request time (faster; " in check.text()
    assert result.launches <= result.bound and Minimization.from_dict(result.to_dict()) == result


def test_removals_each_inside_the_noise_that_add_up_to_the_speed_up_leave_a_minimal_champion_no_faster():
    """Issue 47: a change worth 4% is removed at [0.938, 0.986] (slower on every launch, but under the margin of
    twice the champion's 2.5% launch noise), which leaves the baseline's own configuration; before, nothing
    compared it with the baseline and export wrote it as "1.040x the baseline as confirmed"."""
    champion = ServingConfig.from_dict({"engine": "exllamav3", "args": {"max_chunk_size": 4096}})

    def scripted(config, label):  # a test double for fresh launches: the 4K chunk is worth 4%, launches 2.5% apart
        t = (1.0 if config.args.max_chunk_size == 4096 else 1.04) * (1.0, 1.025)[int(label.rsplit("/", 1)[-1])]
        return Launch(request_time_s=t, decode_tok_per_s=100 / t, prefill_tok_per_s=1000.0)

    result = minimize(champion, BASELINE, scripted, launches=2)
    low, high = result.costs["max_chunk_size"].request[1:]
    # slower on every launch, but two launches a side at 2.5% apart cannot show 4% (the speed verdict's t interval)
    assert low < 1 / 1.04 < high and high > 1
    assert result.kept == () and result.minimal == BASELINE  # so the removal went out as "same"
    assert result.versus_baseline is not None and not result.versus_baseline.faster
    assert "not shown faster" in result.versus_baseline.text()


def _baseline_history(spread: float, n: int = 6) -> list[Launch]:
    """Earlier launches of the baseline (its trial's, drift checks', finalists'), `spread` apart in turn."""
    times = [1.0 * (1 + spread * (-1) ** k) for k in range(n)]
    return [Launch(request_time_s=t, decode_tok_per_s=100 / t, prefill_tok_per_s=1000.0) for t in times]


def test_the_baselines_earlier_launches_pool_the_spread_of_the_round_against_it():
    """A minimal champion 6.4% faster, its round's launches 3% apart: two a side alone cannot show it; pooled with the
    baseline's six earlier launches 1% apart (as the finalists' verdict pools them) they can. A baseline whose
    earlier launches drifted 10% apart widens the interval instead: the history is the baseline's own noise, never a
    licence to crown."""
    champion = ServingConfig.from_dict({"engine": "exllamav3", "args": {"max_chunk_size": 4096}})

    def scripted(config, label):  # a test double for fresh launches: 6% faster, launches 3% apart
        t = (0.94 if config.args.max_chunk_size == 4096 else 1.0) * (1.0, 1.03)[int(label.rsplit("/", 1)[-1])]
        return Launch(request_time_s=t, decode_tok_per_s=100 / t, prefill_tok_per_s=1000.0)

    def versus(history):
        return against_baseline(scripted, BASELINE, champion, launches=2, history=history)

    alone, steady, drifting = versus(()), versus(_baseline_history(0.01)), versus(_baseline_history(0.10))
    assert not alone.faster and alone.cost.history == 0
    assert steady.faster and steady.cost.history == 6 and "pooled with the baseline's 6 earlier launches" in steady.text()
    assert steady.cost.request[0] == alone.cost.request[0]  # the history moves the spread, never the ratio
    assert not drifting.faster and drifting.cost.request[1] < alone.cost.request[1]
    assert BaselineCheck.from_dict(steady.to_dict()) == steady  # the history's count is stored with the verdict


def test_nothing_removed_needs_no_round_against_the_baseline():
    runs = ScriptedLaunches({frozenset({c.name}): 1.5 for c in changes_of(CHAMPION, BASELINE)} |
                            {frozenset({"draft_mode", "ngram_match_min", "num_draft_tokens"}): 1.5})
    result = minimize(CHAMPION, BASELINE, runs, launches=2)
    assert result.minimal == CHAMPION and result.versus_baseline is None
    assert not any(label.startswith("baseline/") for label in runs.labels)


def test_removing_drafting_puts_back_what_only_applies_with_it():
    config, removed = without(CHAMPION, BASELINE, "draft_mode")
    assert set(removed) == {"draft_mode", "ngram_match_min", "num_draft_tokens"}
    assert config.args.draft_mode == "none" and config.args.ngram_match_min == 0
    config, removed = without(CHAMPION, BASELINE, "ngram_match_min")  # drafting stays: the catalog's default
    assert removed == ("ngram_match_min",) and config.args.ngram_match_min == 2


def test_an_unmeasured_champion_is_an_error_and_an_unmeasured_removal_is_kept():
    with pytest.raises(MinimizeError, match="no launch of the champion"):
        minimize(CHAMPION, BASELINE, lambda c, label: None, launches=2)
    runs = ScriptedLaunches(_drafting_matters(), fail={frozenset({"prefill_cooldown"})})
    result = minimize(CHAMPION, BASELINE, runs, launches=2)
    assert result.costs["prefill_cooldown"] is None and "prefill_cooldown" in result.kept
    assert "never measured" in result.unremovable["prefill_cooldown"]


def test_the_record_survives_a_round_trip():
    result = minimize(CHAMPION, BASELINE, ScriptedLaunches(_drafting_matters()), launches=2)
    assert Minimization.from_dict(result.to_dict()) == result


class PrefillMatters(ScriptedLaunches):
    """Request time alike without max_chunk_size (a decode-heavy workload), but prefill at half the rate."""

    def __call__(self, config: ServingConfig, label: str) -> Launch | None:
        got = super().__call__(config, label)
        if "max_chunk_size" in {c.name for c in changes_of(config, CHAMPION)}:
            return Launch(got.request_time_s, got.decode_tok_per_s, got.prefill_tok_per_s / 2)
        return got


def test_a_removal_slower_on_prefill_beyond_its_floor_stays_though_request_time_is_alike():
    """Before: only request time was judged, and a removal that halved prefill went out as 'same'."""
    result = minimize(CHAMPION, BASELINE, PrefillMatters({}), launches=2)
    assert result.costs["max_chunk_size"].verdict == "slower" and result.costs["max_chunk_size"].prefill[2] < 1
    assert "max_chunk_size" in result.kept
    assert [a.reason for a in result.attempts if a.name == "max_chunk_size"][-1].startswith("kept: without it, measurably slower")
