"""--rank-by energy: the same gate, rule and confirmation as request time, on joules per request. The launcher,
bench and the GPU's power draw are `fakes.FakeLauncher`: one finalist is faster and draws far more power, the
other slower on decode and frugal, so time and energy crown different finalists."""

from __future__ import annotations

import dataclasses

import pytest

from autoresearch.crown.finalists import confirm_finalists, load_champion
from autoresearch.ground.errors import PlanError
from autoresearch.ground.ranked_by import ENERGY_RANKED, RANKED_BY, settle_ranked_by
from autoresearch.ground.study import open_study
from autoresearch.loop import _speedups
from autoresearch.measures.energy import ENERGY_RATES
from autoresearch.measures.ranking import objective_rates, save_request_mix
from autoresearch.measures.request_time import RequestMix
from bench import noise_floor

from .fakes import FakeLauncher, bench_result
from .stage_env import StageEnv

HOT = {"max_chunk_size": 4096}  # 30% faster decode, at 450 W
LEAN = {"max_chunk_size": 1024}  # 5% faster decode and 1% faster prefill, at 200 W
BASE = (100.0, 1000.0, 300.0)  # decode tok/s, prefill tok/s, watts
SEARCH = {None: BASE, "hot": (130.0, 1000.0, 450.0), "lean": (105.0, 1010.0, 200.0)}


def _study(env: StageEnv, rank_by: str, search: dict | None = None, **baseline) -> dict[str, int]:
    """A study ranked by `rank_by` whose search measured the baseline, HOT and LEAN (their rates and energy
    stored as a trial stores them); the trial numbers by name."""
    plan = env.plan.bench_plan
    settle_ranked_by(env.study, rank_by, new=True)
    save_request_mix(env.study, RequestMix.from_bench(bench_result(plan, *BASE[:2], watts=BASE[2])))

    def attrs(decode: float, prefill: float, watts: float) -> dict:
        result = bench_result(plan, decode, prefill, watts=watts)
        return {"rates": objective_rates(result), ENERGY_RATES: result.energy_headline()}

    numbers = {"baseline": env.baseline_done(values=BASE[:2], **baseline, **attrs(*BASE))}
    search = SEARCH | (search or {})
    for name, changes in (("hot", HOT), ("lean", LEAN)):
        numbers[name] = env.add_trial(changes, search[name][:2], **attrs(*search[name]))
    return numbers


def _launcher(env: StageEnv, monkeypatch, lean_watts=200.0) -> FakeLauncher:
    return FakeLauncher(speeds={"*": BASE[:2], env.digest(HOT): SEARCH["hot"][:2], env.digest(LEAN): SEARCH["lean"][:2]},
                        watts={"*": BASE[2], env.digest(HOT): 450.0, env.digest(LEAN): lean_watts}).install(monkeypatch)


def _verdicts(env: StageEnv) -> dict[int, dict]:
    return {r["trial"]: r["verdict"] for r in env.db.finalists(study="stages")}


@pytest.mark.parametrize(("rank_by", "crowned", "ranked_by"), [("time", "hot", RANKED_BY),
                                                               ("energy", "lean", ENERGY_RANKED)])
def test_time_and_energy_crown_different_finalists_by_the_same_rule(tmp_path, small_model, monkeypatch, rank_by,
                                                                    crowned, ranked_by):
    env = StageEnv.make(tmp_path, small_model, finalists=2, finalist_launches=2)
    trials = _study(env, rank_by)
    _launcher(env, monkeypatch)
    champion = confirm_finalists(env.plan, env.study, env.space, env.db)
    assert champion.trial == trials[crowned] and champion.ranked_by == ranked_by
    verdicts = _verdicts(env)
    lean = verdicts[trials["lean"]]
    if rank_by == "energy":
        # decode tokens per joule 130/450 against 100/300: more energy per request in search, so no finalist
        assert trials["hot"] not in verdicts
        assert lean["reason"].startswith("less energy: energy per request 1.")
        assert lean["speed"]["measure"] == ENERGY_RANKED and champion.speedup > 1.4
        assert {c["metric"].split("@")[0] for c in lean["comparisons"]} == {"prefill_tok_per_j", "decode_tok_per_j"}
        assert verdicts[trials["baseline"]]["noise_floor_of"] == "energy per request"
    else:
        hot = verdicts[trials["hot"]]
        assert hot["qualified"] and hot["reason"].startswith("faster: request time 1.")
        assert lean["speed"]["measure"] == RANKED_BY
        assert hot["speedup"] > lean["speedup"] > 1
    assert load_champion(env.study)["ranked_by"] == ranked_by
    # the line the loop prints at the end: the ranked measure with the interval its launches gave it
    low, high = champion.speed["interval"]
    words = "energy per request" if rank_by == "energy" else "request time"
    assert _speedups(champion).startswith(f"{words} {champion.speedup:.3f}x ")
    assert f"[{low:.3f}, {high:.3f}] (2 launches against the baseline's 2)" in _speedups(champion)


def test_a_finalist_frugal_in_search_that_draws_more_in_fresh_launches_is_not_crowned(tmp_path, small_model,
                                                                                     monkeypatch):
    env = StageEnv.make(tmp_path, small_model, finalists=2, finalist_launches=2)
    trials = _study(env, "energy", search={"hot": (130.0, 1000.0, 250.0)})  # the search's one launch drew 250 W
    _launcher(env, monkeypatch)  # its fresh launches draw 450 W
    champion = confirm_finalists(env.plan, env.study, env.space, env.db)
    hot = _verdicts(env)[trials["hot"]]
    assert hot["qualified"] is False and hot["reason"].startswith("more energy: energy per request 0.")
    assert champion.trial == trials["lean"]


def test_a_one_launch_energy_round_judges_with_the_baselines_energy_floor_not_its_speed_floor(tmp_path, small_model,
                                                                                             monkeypatch):
    env = StageEnv.make(tmp_path, small_model, finalists=2, finalist_launches=1)
    plan = env.plan.bench_plan
    energy_floor = noise_floor(bench_result(plan, *BASE[:2], watts=300.0).energy_samples(),
                               bench_result(plan, *BASE[:2], watts=330.0).energy_samples()).to_dict()  # 10% apart
    speed_floor = noise_floor(bench_result(plan, 100.0, 1000.0).samples(),
                              bench_result(plan, 100.1, 1001.0).samples()).to_dict()  # 0.1%
    trials = _study(env, "energy", floor=speed_floor, energy_floor=energy_floor)
    _launcher(env, monkeypatch, lean_watts=270.0)  # about 11% fewer joules: within 2 x a 10% floor
    champion = confirm_finalists(env.plan, env.study, env.space, env.db)
    verdicts = _verdicts(env)
    assert verdicts[trials["baseline"]]["noise_floor"] == pytest.approx(energy_floor)
    assert verdicts[trials["lean"]]["reason"].startswith("not shown to use less energy: energy per request 1.")
    assert champion.is_baseline


def test_an_energy_ranked_finalist_whose_launches_read_no_energy_is_not_measured_never_zero(tmp_path, small_model,
                                                                                            monkeypatch):
    env = StageEnv.make(tmp_path, small_model, finalists=2, finalist_launches=2)
    trials = _study(env, "energy")
    _launcher(env, monkeypatch, lean_watts=[None, None])  # NVML gave no reading in either of its launches
    champion = confirm_finalists(env.plan, env.study, env.space, env.db)
    lean = _verdicts(env)[trials["lean"]]
    assert lean["qualified"] is False and lean.get("speedup") is None
    assert lean["reason"].startswith("not measured: no confirmation launch counts (launch 0: not measured: energy "
                                     "per request needs")
    assert champion.is_baseline and "no finalist was confirmed less energy" in load_champion(env.study)["reason"]


def test_one_launch_without_energy_does_not_count_the_other_still_judges(tmp_path, small_model, monkeypatch):
    env = StageEnv.make(tmp_path, small_model, finalists=2, finalist_launches=2)
    trials = _study(env, "energy")
    _launcher(env, monkeypatch, lean_watts=[200.0, None])
    confirm_finalists(env.plan, env.study, env.space, env.db)
    lean = _verdicts(env)[trials["lean"]]
    assert lean["launches"] == 1 and lean["speed"]["launches"] == [2, 1]


def test_a_resumed_study_with_another_rank_by_is_refused_in_one_line(tmp_path, small_model):
    env = StageEnv.make(tmp_path, small_model)
    env.study = open_study(env.plan, env.space)
    assert env.study.user_attrs["ranked_by"] == RANKED_BY and "request time" in env.study.user_attrs["ranking"]
    env.add_trial(None, (100.0, 1000.0), role="baseline")  # something was measured, ranked by time
    with pytest.raises(PlanError) as caught:
        open_study(dataclasses.replace(env.plan, rank_by="energy"), env.space)
    assert str(caught.value) == ("--rank-by: study stages was ranked by time, this run gives energy; resume with the "
                                 "stored value, or start afresh with --study NEW")
    assert open_study(env.plan, env.space).user_attrs["ranked_by"] == RANKED_BY  # the same --rank-by resumes


def test_a_study_that_measured_nothing_takes_this_runs_rank_by(tmp_path, small_model):
    env = StageEnv.make(tmp_path, small_model)
    open_study(env.plan, env.space)
    study = open_study(dataclasses.replace(env.plan, rank_by="energy"), env.space)
    assert study.user_attrs["ranked_by"] == ENERGY_RANKED and "energy per request" in study.user_attrs["ranking"]


def test_energy_ranking_is_refused_where_bench_reads_no_gpu_and_minimizes_like_time(tmp_path, small_model):
    env = StageEnv.make(tmp_path, small_model)
    with pytest.raises(PlanError, match="needs the GPU's energy readings"):
        dataclasses.replace(env.plan, rank_by="energy", bench_plan=dataclasses.replace(env.plan.bench_plan,
                                                                                       gpu_index=None))
    # the minimization keeps energy per request there (tests/autoresearch/test_minimize_energy.py)
    assert dataclasses.replace(env.plan, rank_by="energy", minimize=True).minimize


@pytest.mark.parametrize("rank_by", ["time", "energy"])
def test_results_md_says_what_ranked_and_shows_the_other_measure_of_the_champion(tmp_path, small_model, monkeypatch,
                                                                                 rank_by):
    from autoresearch.report.results_md import render
    from autoresearch.report.snapshot import read_snapshot

    env = StageEnv.make(tmp_path, small_model, finalists=2, finalist_launches=2)
    trials = _study(env, rank_by)
    _launcher(env, monkeypatch)
    champion = confirm_finalists(env.plan, env.study, env.space, env.db)
    text = render(read_snapshot(env.plan, env.study, env.db, env.store))
    crowned = f"**trial {champion.trial}**: "
    if rank_by == "energy":
        assert "Ranked by energy per request on the workload (--rank-by energy)" in text
        line = next(line for line in text.splitlines() if line.startswith(crowned))
        assert line.startswith(f"{crowned}energy per request on the workload {1 / champion.speedup:.3f}x the "
                               f"baseline's (E(baseline) / E(champion) {champion.speedup:.3f}x")
        # the reverse: its request time against the baseline's, from the same launches (decode 105 against 100)
        assert "Request time on the workload, from the same launches by the same estimator (as the decision takes " \
               "energy): 1.0" in line
        assert "Its energy per request:" not in text
    else:
        assert champion.trial == trials["hot"] and "Ranked by request time on the workload" in text
        energy = next(line for line in text.splitlines() if line.startswith("Its energy per request: "))
        ratio = float(energy.split(" J, ")[1].split("x")[0])
        assert ratio > 1.0  # 450 W for 30% more decode speed: more joules per request than the baseline's


def test_best_so_far_names_the_measure_the_study_is_ranked_by(tmp_path, small_model):
    from autoresearch.loop import best_line

    env = StageEnv.make(tmp_path, small_model)
    trials = _study(env, "energy")
    assert best_line(env.study).startswith(f"trial {trials['lean']}: decode 105.0, prefill 1010 tok/s (")
    assert best_line(env.study).endswith("x by energy per request)")


# Fresh launches that differ as the real 0.5B's did (examples/real-0.5b-energy): a launch fast on decode and slow on
# prefill beside one the other way round, so no launch is the launch of the points' medians. (decode, prefill), watts.
IRREGULAR_BASE = ([(100.0, 1030.0), (97.0, 1000.0), (108.0, 880.0)], [300.0, 306.0, 290.0])
IRREGULAR_CROWNED = ([(150.0, 1420.0), (138.0, 1300.0), (162.0, 1150.0)], [200.0, 212.0, 196.0])


@pytest.mark.parametrize(("rank_by", "crowned"), [("time", HOT), ("energy", LEAN)])
def test_results_md_states_the_decisions_ratios_where_pooled_launches_would_say_otherwise(tmp_path, small_model,
                                                                                         monkeypatch, rank_by, crowned):
    """Before: the finalists' and energy tables (and the champion's line) pooled the launches' points and read
    request time 1.339x and energy 0.515x where the decision's per-launch medians give 1.325x and 0.519x."""
    import statistics

    from autoresearch.measures.ranking import Ranking
    from autoresearch.measures.request_time import median_headline
    from autoresearch.report.results_md import render
    from autoresearch.report.snapshot import read_snapshot

    env = StageEnv.make(tmp_path, small_model, finalists=1, finalist_launches=3)
    trials = _study(env, rank_by)
    FakeLauncher(speeds={"*": IRREGULAR_BASE[0], env.digest(crowned): IRREGULAR_CROWNED[0]},
                 watts={"*": IRREGULAR_BASE[1], env.digest(crowned): IRREGULAR_CROWNED[1]}).install(monkeypatch)
    champion = confirm_finalists(env.plan, env.study, env.space, env.db)
    assert not champion.is_baseline and champion.trial == trials["hot" if crowned is HOT else "lean"]

    mix, plan = Ranking.of(env.study).mix, env.plan.bench_plan
    base = [bench_result(plan, *s, watts=w) for s, w in zip(*IRREGULAR_BASE, strict=True)]
    cand = [bench_result(plan, *s, watts=w) for s, w in zip(*IRREGULAR_CROWNED, strict=True)]
    seconds = [[mix.time_s(r.headline()) for r in side] for side in (base, cand)]
    joules = [[mix.energy_j(r.energy_headline()) for r in side] for side in (base, cand)]
    time_ratio = statistics.median(seconds[0]) / statistics.median(seconds[1])  # the decision's: per-launch medians
    energy_vs = statistics.median(joules[1]) / statistics.median(joules[0])
    pooled_time = mix.time_s(median_headline(r.headline() for r in base)) / \
        mix.time_s(median_headline(r.headline() for r in cand))
    pooled_energy = mix.energy_j(median_headline(r.energy_headline() for r in cand)) / \
        mix.energy_j(median_headline(r.energy_headline() for r in base))
    assert f"{time_ratio:.3f}" != f"{pooled_time:.3f}" and f"{energy_vs:.3f}" != f"{pooled_energy:.3f}"
    decided = _verdicts(env)[champion.trial]["speed"]["speedup"]  # the decision's own, by the ranked measure
    assert decided == pytest.approx(time_ratio if rank_by == "time" else 1 / energy_vs)

    text = render(read_snapshot(env.plan, env.study, env.db, env.store))
    line = next(line for line in text.splitlines() if line.startswith(f"**trial {champion.trial}**: "))
    assert f"{time_ratio:.3f}x" in line and f"{pooled_time:.3f}x" not in line
    if rank_by == "energy":
        assert f"(E(baseline) / E(champion) {1 / energy_vs:.3f}x" in line
    else:
        its_energy = next(line for line in text.splitlines() if line.startswith("Its energy per request: "))
        assert its_energy.startswith(f"Its energy per request: {statistics.median(joules[1]):,.1f} J, {energy_vs:.3f}x")
    row = next(line for line in text.splitlines() if line.startswith(f"| 1 | {champion.trial} | "))
    per_launch = ", ".join(f"{s:.3f}" for s in seconds[1])
    assert f"| {time_ratio:.3f}x | {per_launch} |" in row
    base_row = next(line for line in text.splitlines() if line.startswith(f"| 1 | {trials['baseline']} | "))
    assert f"| 1.000x | {', '.join(f'{s:.3f}' for s in seconds[0])} |" in base_row
    for label in (f"champion (trial {champion.trial})", f"finalist: round 1, trial {champion.trial}"):
        energy_row = next(line for line in text.splitlines() if line.startswith(f"| {label} |"))
        assert energy_row.startswith(f"| {label} | {time_ratio:.3f}x | {statistics.median(joules[1]):,.1f} | "
                                     f"{', '.join(f'{j:,.1f}' for j in joules[1])} | {energy_vs:.3f}x |")
    reference = next(line for line in text.splitlines() if line.startswith(f"| finalist: round 1, trial {trials['baseline']} |"))
    assert f"| {statistics.median(joules[0]):,.1f} |" in reference
