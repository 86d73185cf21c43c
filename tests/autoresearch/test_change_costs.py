"""RESULTS.md's "What each change bought", rendered from a stored minimization of scripted launches."""

from __future__ import annotations

from autoresearch.champion.change_costs import read_change_costs, signed_change
from autoresearch.champion.minimize import minimize
from autoresearch.report.results_md import render_section
from tests.autoresearch.test_minimize import BASELINE, CHAMPION, ScriptedLaunches, _drafting_matters


def _table() -> str:
    result = minimize(CHAMPION, BASELINE, ScriptedLaunches(_drafting_matters()), launches=2)
    stored = result.to_dict() | {"extra": {"gate": {"passed": True, "reason": "fidelity within the floor"}}}
    return render_section("change_costs", read_change_costs(stored))


def test_each_change_has_a_row_with_its_removal_costs_and_whether_the_minimal_champion_keeps_it():
    text = _table()
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in text.splitlines() if line.startswith("| `")}
    assert set(rows) == {"`draft_mode=ngram`", "`hybrid_draft_tokens=4`", "`max_chunk_size=8192`", "`ngram_match_min=3`",
                         "`num_draft_tokens=10`", "`prefill_cooldown=3`", "`EXL3_QKV_SLICE=0`"}
    carried, request, decode, prefill, verdict, kept = rows["`draft_mode=ngram`"]
    assert carried == "ngram_match_min, num_draft_tokens"
    assert 29.9 <= float(request.split("%")[0]) <= 30.1 and -23.2 <= float(decode.split("%")[0]) <= -23.0
    assert prefill.startswith("+0.0%")
    assert verdict == "slower" and kept.startswith("kept (without it, measurably slower")
    assert rows["`prefill_cooldown=3`"][4:] == ["same", "removed"]
    assert "**Minimal champion:** `draft_mode=ngram, max_chunk_size=8192`" in text
    assert "Gate: passed: fidelity within the floor" in text and "stopped at that bound" not in text


def test_no_minimization_no_section():
    assert read_change_costs(None) is None
    assert render_section("change_costs", None).strip() == ""


def test_a_minimization_stopped_before_its_end_says_what_is_stored_and_how_it_resumes():
    from autoresearch.report.results_md import _template

    text = str(_template().module.change_costs(None, 11))
    assert "## What each change bought (minimization)" in text and "**Not finished:** 11 launches" in text
    assert "Run the same command again" in text and "| `" not in text  # no table from a partial record


def test_signed_change_reads_time_the_other_way_round():
    assert signed_change((0.8, 0.75, 0.85)) == "-20.0% [-25.0, -15.0]"
    assert signed_change((0.8, 0.75, 0.85), time=True) == "+25.0% [+17.6, +33.3]"


def _cost(request: float) -> dict:
    return {"request": [request, request * 0.95, request * 1.05], "decode": [0.8, 0.78, 0.82],
            "prefill": [1.0, 0.9, 1.1], "verdict": "slower", "launches": 2}


def test_the_subsets_tabbyapi_can_run_are_listed_with_their_costs_and_the_exported_one_named():
    minimal = {"of": "minimal", "digest": "a" * 64, "config": {}, "cost": _cost(0.8)}
    champion = {"of": "champion", "digest": "b" * 64, "config": {}, "cost": _cost(0.6)}
    result = minimize(CHAMPION, BASELINE, ScriptedLaunches(_drafting_matters()), launches=2)
    stored = result.to_dict() | {"extra": {"tabbyapi_subset": {**minimal, "tried": [minimal, champion]}}}
    text = render_section("change_costs", read_change_costs(stored))
    lines = [line for line in text.splitlines() if "subset (`" in line]
    # the time a request takes is the inverse of the stored rate ratio: 1/0.8 is +25%, 1/0.6 is +66.7%
    assert lines == ["- the minimal champion's subset (`aaaaaaaaaaaa`): request time +25.0% [+19.0, +31.6], decode "
                     "-20.0% [-22.0, -18.0], prefill +0.0% [-10.0, +10.0] (2 launches); `export --format tabbyapi` "
                     "writes it",
                     "- the confirmed champion's subset (`bbbbbbbbbbbb`): request time +66.7% [+58.7, +75.4], decode "
                     "-20.0% [-22.0, -18.0], prefill +0.0% [-10.0, +10.0] (2 launches)"]
    assert "**What TabbyAPI can run of it**" in text


def test_no_tabbyapi_lines_where_the_minimal_champion_is_fully_expressible():
    result = minimize(CHAMPION, BASELINE, ScriptedLaunches(_drafting_matters()), launches=2)
    text = render_section("change_costs", read_change_costs(result.to_dict()))
    assert "What TabbyAPI can run" not in text and "subset (`" not in text


def test_the_minimal_champion_states_its_own_speed_up_against_the_baseline_and_which_one_export_writes():
    """Before: RESULTS.md gave the minimal champion's cost against the champion only; nothing said whether it was
    itself faster than the baseline, and export wrote it under the champion's speed-up."""
    result = minimize(CHAMPION, BASELINE, ScriptedLaunches(_drafting_matters()), launches=2)
    gated = {"passed": True, "reason": "fidelity within the floor", "digest": result.minimal.digest}
    text = render_section("change_costs", read_change_costs(result.to_dict() | {"extra": {"gate": gated}}, CHAMPION))
    assert "; its own speed-up, against the baseline in fresh launches: 1.364x [1.364, 1.364] the baseline on request " \
           "time (faster; decode 1.364x, prefill 1.000x; 2 fresh launches each, interleaved)." in text
    assert "Gate: passed: fidelity within the floor. `export` writes the minimal champion." in text

    nothing_bought = ScriptedLaunches({})  # every configuration as fast as any other: everything goes
    result = minimize(CHAMPION, BASELINE, nothing_bought, launches=2)
    stored = result.to_dict() | {"extra": {"gate": gated | {"digest": result.minimal.digest}}}
    text = render_section("change_costs", read_change_costs(stored, CHAMPION))
    assert "Gate: passed: fidelity within the floor. `export` writes the confirmed champion: it was not shown faster " \
           "than the baseline: 1.000x [1.000, 1.000] the baseline on request time (not shown faster; " in text
