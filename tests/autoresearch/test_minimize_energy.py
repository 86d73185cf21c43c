"""--minimize in a study ranked by energy: the same removals, the same rule (autoresearch.measures.faster), on
joules per request. The launcher, bench and the GPU's power draw are `fakes.FakeLauncher`, scripted per
configuration and per launch (no two of the champion's launches draw the same): without the larger prefill
chunk the server is 10% slower but draws far less, so it costs time and no energy; without the smaller
cache-slot count it is as fast and draws 20% more."""

from __future__ import annotations

import pytest

from autoresearch.champion.minimal_champion import _tabbyapi_subset, minimize_champion
from autoresearch.champion.minimize import Launch, MinimizeError
from autoresearch.crown.finalists import Champion
from autoresearch.ground.ranked_by import ENERGY_RANKED, RANKED_BY, settle_ranked_by
from autoresearch.measures.faster import ENERGY, TIME
from search_space import config_from_params

from .fakes import FakeLauncher
from .stage_env import StageEnv

CHAMPION = {"max_chunk_size": 4096, "cache_slots": 8}
NO_CHUNK = {"cache_slots": 8}  # without max_chunk_size: 10% slower, and much less power
NO_SLOTS = {"max_chunk_size": 4096}  # without cache_slots: as fast, 20% more power


def _study(tmp_path, small_model, rank_by: str) -> tuple[StageEnv, Champion]:
    env = StageEnv.make(tmp_path, small_model)
    settle_ranked_by(env.study, rank_by, new=True)
    # the workload's requests come from the baseline's bench record; it read what its fresh launches read (the
    # launcher's "*"): the round against the baseline pools its spread with it
    env.baseline_done(values=(90.0, 900.0))
    config = config_from_params(env.space, env.params(CHAMPION))
    number = env.add_trial(CHAMPION, (100.0, 1000.0))
    champion = Champion(trial=number, config=config.to_dict(), decode_tok_per_s=100.0, prefill_tok_per_s=1000.0,
                        speedup=1.2, is_baseline=False, ranked_by=ENERGY_RANKED if rank_by == "energy" else RANKED_BY)
    env.study.set_user_attr("champion", champion.__dict__ | {"round": 1, "reason": "confirmed faster"})  # as crowned
    return env, champion


def _launcher(env: StageEnv, monkeypatch, **watts) -> FakeLauncher:
    """Each configuration's speeds and its draw in each of its launches, in order (None: NVML read nothing)."""
    champion = [(100.0, 1000.0), (101.0, 1004.0), (99.5, 998.0), (100.5, 1002.0), (100.0, 999.0), (99.8, 1001.0)]
    draws = {"champion": [300.0, 306.0, 297.0, 303.0, 301.0, 304.0], "no_chunk": [255.0, 258.0, 254.0, 256.0, 257.0,
                                                                                   255.5],
             "no_slots": [360.0, 363.0, 358.0, 361.0, 362.0, 360.5],
             "baseline": [310.0, 312.0, 311.0, 309.5]} | watts  # the last two: against the minimal champion
    return FakeLauncher(
        speeds={env.digest(CHAMPION): champion, env.digest(NO_CHUNK): (90.0, 900.0),
                env.digest(NO_SLOTS): (100.0, 1000.0), "*": (90.0, 900.0)},
        watts={env.digest(CHAMPION): draws["champion"], env.digest(NO_CHUNK): draws["no_chunk"],
               env.digest(NO_SLOTS): draws["no_slots"], "*": draws["baseline"]}).install(monkeypatch)


@pytest.mark.parametrize(("rank_by", "kept", "removed"), [("energy", "cache_slots", "max_chunk_size"),
                                                          ("time", "max_chunk_size", "cache_slots")])
def test_an_energy_ranked_minimization_removes_what_costs_time_but_no_energy_and_keeps_what_costs_energy(
        tmp_path, small_model, monkeypatch, rank_by, kept, removed):
    from autoresearch.report.results_md import render
    from autoresearch.report.snapshot import read_snapshot

    env, champion = _study(tmp_path, small_model, rank_by)
    _launcher(env, monkeypatch)
    result = minimize_champion(env.plan, env.study, env.db, champion)
    assert result.kept == (kept,) and result.complete
    attempts = {a.name: a for a in result.attempts}
    if rank_by == "time":  # the same launches ranked by time: the chunk size costs 10% request time, so it stays
        assert attempts["max_chunk_size"].reason == "kept: without it, measurably slower than the champion"
        assert attempts["cache_slots"].reason == "removed: without it, same as the champion"
        assert result.costs["cache_slots"].energy is None and "ranked_by" not in result.to_dict()
        assert result.versus_baseline.faster  # the minimal champion at 100 tok/s, the baseline at 90
        return
    # the minimal champion (without the chunk size) against the baseline: as fast, at 255 W against 310
    assert result.versus_baseline.faster and result.versus_baseline.cost.energy[0] > 1.15
    assert "the baseline on energy per request (less energy; " in result.versus_baseline.text()
    assert [a.name for a in result.attempts] == ["max_chunk_size", "cache_slots"]  # least energy lost first
    chunk = attempts["max_chunk_size"]
    assert chunk.accepted and chunk.cost.request[0] < 0.95 and chunk.cost.energy[0] > 1.0  # slower, fewer joules
    assert chunk.reason.startswith("removed: without it, ") and "energy per request than the champion" in chunk.reason
    slots = attempts["cache_slots"]  # tried on the configuration without the chunk size: the baseline, at 310 W
    assert not slots.accepted and slots.cost.energy[2] < 1.0
    assert slots.reason == "kept: without it, measurably more energy per request than the champion"
    ranked_alone = result.costs["cache_slots"]
    assert ranked_alone.verdict == "slower" and ranked_alone.request[0] == pytest.approx(1, abs=0.02)
    assert result.ranked_by == ENERGY_RANKED and result.to_dict()["costs"]["cache_slots"]["ranked_by"] == ENERGY_RANKED

    text = render(read_snapshot(env.plan, env.study, env.db, env.store))
    section = text.split("## What each change bought (minimization)")[1]
    assert "least energy lost first" in section and "energy per request against the champion in its last" in section
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in section.splitlines()
            if line.startswith("| `")}
    assert rows["`cache_slots=8`"][5] == "more energy" and rows["`cache_slots=8`"][1].startswith("+")  # energy
    assert rows["`cache_slots=8`"][6] == "kept (without it, measurably more energy per request than the champion)"
    assert rows["`max_chunk_size=4096`"][5] in ("less energy", "not shown to use less energy")
    assert rows["`max_chunk_size=4096`"][1].startswith("-")  # fewer joules without it
    assert rows["`max_chunk_size=4096`"][2].startswith("+")  # and a longer request time: removed all the same


def test_a_removal_whose_launches_read_no_energy_is_refused_saying_why_never_as_zero_joules(tmp_path, small_model,
                                                                                            monkeypatch):
    env, champion = _study(tmp_path, small_model, "energy")
    # the chunk size's removal read energy in the ranking round, none in its attempt; the slots' never
    _launcher(env, monkeypatch, no_chunk=[255.0, 258.0, None, None], no_slots=[None, None, None, None])
    result = minimize_champion(env.plan, env.study, env.db, champion)
    assert set(result.kept) == {"max_chunk_size", "cache_slots"} and result.complete
    (chunk,) = result.attempts
    assert chunk.name == "max_chunk_size" and not chunk.accepted and chunk.cost is None
    assert chunk.reason.startswith("kept: no launch without it was measured (step1/candidate/0: energy per request "
                                   "needs decode_tok_per_j@")
    assert "step1/candidate/1: energy per request needs" in chunk.reason
    assert result.costs["cache_slots"] is None
    assert result.unremovable["cache_slots"].startswith("its removal was never measured (rank/cache_slots/0: energy "
                                                        "per request needs")


def test_a_champion_whose_launches_read_no_energy_cannot_be_minimized_and_says_why(tmp_path, small_model, monkeypatch):
    env, champion = _study(tmp_path, small_model, "energy")
    _launcher(env, monkeypatch, champion=[None] * 6)
    with pytest.raises(MinimizeError, match=r"rank: no launch of the champion was measured; nothing to compare "
                                            r"removals against \(rank/champion/0: energy per request needs"):
        minimize_champion(env.plan, env.study, env.db, champion)


@pytest.mark.parametrize(("ranked", "of"), [(TIME, "champion"), (ENERGY, "minimal")])
def test_the_tabbyapi_subset_is_chosen_on_the_studys_measure(ranked, of, tmp_path, small_model):
    """The confirmed champion's subset is 10% faster than the minimal champion's and draws 30% more: time takes
    it, energy keeps the minimal champion's."""
    env = StageEnv.make(tmp_path, small_model)
    full = config_from_params(env.space, env.params({"max_chunk_size": 4096, "prefill_cooldown": 0}))
    minimal = config_from_params(env.space, env.params({"prefill_cooldown": 0}))

    def measure(config, label):
        jitter = 1 + 0.01 * int(label.rsplit("/", 1)[-1])
        fast = config.args.max_chunk_size == 4096
        seconds, watts = (1.0, 390.0) if fast else (1.1, 300.0)
        return Launch(request_time_s=seconds * jitter, decode_tok_per_s=100 / seconds / jitter,
                      prefill_tok_per_s=1000 / seconds / jitter, energy_j=seconds * watts * jitter,
                      decode_tok_per_j=100 / (seconds * watts * jitter), prefill_tok_per_j=1000 / (seconds * watts * jitter))

    subset = _tabbyapi_subset(full, minimal, measure, 2, hybrid=False, ranked=ranked)
    assert subset["of"] == of
    if ranked == ENERGY:
        # a subset is chosen over another only where shown better (the claim at stake is "faster"): the champion's,
        # 30% hungrier, is not shown to use less energy, and the minimal champion's stays
        assert subset["chosen"].startswith("the confirmed champion's subset against the minimal champion's: not "
                                           "shown to use less energy, energy per request +")
        assert {t["of"]: t["cost"]["ranked_by"] for t in subset["tried"]} == {"minimal": ENERGY_RANKED,
                                                                              "champion": ENERGY_RANKED}
    else:
        assert subset["chosen"].startswith("the confirmed champion's subset is faster than the minimal champion's")
