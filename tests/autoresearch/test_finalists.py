"""The finalists' round: who is a finalist, what it waits for, the launches its spread is pooled from, how many it
takes, and a holder that lost its claim writes nothing. The launcher and bench are `fakes.FakeLauncher`, its
launches off by WOBBLE (no two alike)."""

from __future__ import annotations

import dataclasses
import math
import threading
import time

import optuna
import pytest
from sqlalchemy import update

from autoresearch.crown.finalists import confirm_finalists, load_champion, select_finalists, settled_trials
from autoresearch.ground.errors import ConfirmedElsewhere
from autoresearch.ground.plan import worker_name
from autoresearch.ground.ranked_by import mark_ranked_by_request_time
from autoresearch.measures.ranking import Ranking, objective_rates, save_request_mix
from autoresearch.measures.request_time import RequestKind, RequestMix
from results import to_jsonable
from results.schema import claims

from .fakes import FakeLauncher, bench_result
from .stage_env import StageEnv

FAST = {"max_chunk_size": 4096}
SLOW = {"max_chunk_size": 1024}
WOBBLE = (1.0, 1.012, 0.993, 1.006, 0.989, 1.009, 0.997, 1.003)


@pytest.fixture
def env(tmp_path, small_model) -> StageEnv:
    return StageEnv.make(tmp_path, small_model, finalists=2, finalist_launches=2, finalist_max_launches=2)


def test_only_front_members_faster_than_the_baseline_are_finalists(env):
    baseline = env.add_trial(None, (100.0, 1000.0), role="baseline")
    lopsided = env.add_trial(SLOW, (120.0, 500.0))  # on the front (fastest decode), but 0.77x overall
    faster = env.add_trial(FAST, (110.0, 1100.0))
    chosen = select_finalists(env.study, Ranking.of(env.study), env.study.get_trials()[baseline], 2)
    assert [t.number for t in chosen] == [faster]
    assert lopsided in {t.number for t in env.study.best_trials}


def test_the_finalists_wait_only_for_trials_running_when_they_looked(env):
    running = env.study.ask()  # another worker's trial, mid-way
    result: list = []
    thread = threading.Thread(target=lambda: result.append(settled_trials(env.study, poll_s=0.02)), daemon=True)
    thread.start()
    time.sleep(0.1)
    assert thread.is_alive(), "it did not wait for the trial that was running"
    later = env.study.ask()  # a trial started after it looked (asked before the tell, so no poll can miss it)
    env.study.tell(running, [1.0, 1.0])
    thread.join(timeout=2)
    assert not thread.is_alive(), "it waited for a trial started after it looked"
    assert later.number in {t.number for t in result[0]}


def _more_baseline_launches(env: StageEnv, rates: list[tuple[float, float]]) -> None:
    """The baseline's second search launch and drift readings, stored as the loop stores them."""
    plan = env.plan.bench_plan
    for i, (decode, prefill) in enumerate(rates):
        payload = to_jsonable(bench_result(plan, decode, prefill).to_dict())
        if i == 0:
            env.db.add_measurement(study="stages", trial=0, kind="bench", config_digest=env.digest(), payload=payload,
                                   launch=1)
        else:
            env.db.add_measurement(study="stages", trial=None, kind="drift_bench", config_digest=env.digest(),
                                   payload={"before_trial": i, "bench": payload, "decode": decode, "prefill": prefill})


def test_the_round_pools_the_spread_from_every_launch_of_the_baseline_the_study_holds(env, monkeypatch):
    """The spread is not one draw from two launches: the search's two, each drift reading and the round's own all
    count; RESULTS.md's floors and error rates are made from the same launches."""
    FakeLauncher(speeds={"*": (100.0, 1000.0), env.digest(FAST): (115.0, 1150.0)}, wobble=WOBBLE).install(monkeypatch)
    env.baseline_done()
    _more_baseline_launches(env, [(101.0, 1012.0), (99.0, 990.0), (100.5, 1003.0)])
    faster = env.add_trial(FAST, (115.0, 1150.0))
    champion = confirm_finalists(env.plan, env.study, env.space, env.db)
    rows = env.db.finalists(study="stages")
    [base] = [r for r in rows if r["verdict"].get("baseline")]
    assert base["verdict"]["history"] == 4 and base["verdict"]["noise"]["launches"] == 4 + 2
    [mine] = [r["verdict"] for r in rows if r["trial"] == faster]
    assert mine["speed"]["history"] == 4 and mine["speed"]["df"] == (4 + 2 - 1) + (2 - 1)
    assert champion.trial == faster and mine["reason"].startswith("faster: request time 1.1")
    assert env.study.user_attrs["baseline_pool"]["launches"] == 6  # the round's launches join the search's reference


def test_a_finalist_in_doubt_is_launched_again_until_its_verdict_is_decisive(tmp_path, small_model, monkeypatch):
    """A clear winner stops at the first look; a finalist 1% faster (under the 1.02x minimum) is launched again at
    the next looks, beside the baseline, until its futility shows; the clock's budget stops a round where it runs
    out."""
    env = StageEnv.make(tmp_path, small_model, finalists=2, finalist_launches=2, finalist_max_launches=5)
    launcher = FakeLauncher(speeds={"*": (100.0, 1000.0), env.digest(FAST): (150.0, 1500.0),
                                    env.digest(SLOW): (101.0, 1010.0)}, wobble=WOBBLE).install(monkeypatch)
    env.baseline_done()
    clear, doubt = env.add_trial(FAST, (150.0, 1500.0)), env.add_trial(SLOW, (160.0, 1000.0))  # both on the front
    champion = confirm_finalists(env.plan, env.study, env.space, env.db)
    assert champion.trial == clear
    in_doubt = launcher.launched(env.digest(SLOW))
    assert launcher.launched(env.digest(FAST)) == 2 < in_doubt == launcher.launched(env.digest())
    verdicts = {r["trial"]: r["verdict"] for r in env.db.finalists(study="stages")}
    assert verdicts[doubt]["reason"].startswith("not shown faster") and verdicts[doubt]["launches"] == in_doubt

    budget: list[int] = []
    (tmp_path / "b").mkdir()
    env2 = StageEnv.make(tmp_path / "b", small_model, finalists=2, finalist_launches=2, finalist_max_launches=5)
    launcher = FakeLauncher(speeds={"*": (100.0, 1000.0), env2.digest(SLOW): (101.0, 1010.0)},
                            wobble=WOBBLE).install(monkeypatch)
    env2.baseline_done()
    env2.add_trial(SLOW, (103.0, 1030.0))
    confirm_finalists(env2.plan, env2.study, env2.space, env2.db,
                      launch_budget=lambda k: budget.append(k) or False)  # no time left past the first look
    assert budget == [2] and launcher.launched(env2.digest(SLOW)) == 2
    [base] = [r["verdict"] for r in env2.db.finalists(study="stages") if r["verdict"].get("baseline")]
    assert base["stopped"] == "the stage's time ran out"


def test_a_holder_whose_claim_was_taken_over_mid_round_writes_no_decision(env, monkeypatch):
    def taken_over(config) -> None:  # while this worker's first launch runs, another takes the claim
        with env.db.engine.begin() as conn:
            conn.execute(update(claims).values(worker="host-b:22"))

    FakeLauncher(speeds={"*": (100.0, 1000.0), env.digest(FAST): (150.0, 1500.0)},
                 on_launch=taken_over, wobble=WOBBLE).install(monkeypatch)
    env.baseline_done()
    env.add_trial(FAST, (150.0, 1500.0))
    plan = dataclasses.replace(env.plan, heartbeat_s=3600)  # no beat happens: only the write can notice
    with pytest.raises(ConfirmedElsewhere, match="taken over"):
        confirm_finalists(plan, env.study, env.space, env.db)
    assert env.db.finalists(study="stages") == [] and load_champion(env.study) is None
    [row] = env.db.claim_rows(study="stages")
    assert row["worker"] == "host-b:22" and row["finished_at"] is None


def test_a_holder_writes_its_decision_and_finishes_its_claim_in_one_go(env, monkeypatch):
    FakeLauncher(speeds={"*": (100.0, 1000.0), env.digest(FAST): (150.0, 1500.0)}, wobble=WOBBLE).install(monkeypatch)
    env.baseline_done()
    faster = env.add_trial(FAST, (150.0, 1500.0))
    champion = confirm_finalists(env.plan, env.study, env.space, env.db)
    assert champion.trial == faster and load_champion(env.study)["trial"] == faster
    [row] = env.db.claim_rows(study="stages")
    assert row["worker"] == worker_name() and row["finished_at"] is not None
    assert len(env.db.finalists(study="stages")) == 2
    assert optuna.trial.TrialState.RUNNING not in {t.state for t in env.study.get_trials()}


def test_a_finalist_faster_on_prefill_and_within_the_floor_slower_on_decode_is_not_crowned(tmp_path, small_model,
                                                                                            monkeypatch):
    """Before: qualified point by point (prefill 1.6x faster, decode 3.75% slower inside a 2% floor's margin) and
    crowned at a request-time speed-up below 1; the search had measured it faster (the optimizer's curse)."""
    env = StageEnv.make(tmp_path, small_model, finalists=1, finalist_launches=2, finalist_max_launches=3)
    plan = env.plan.bench_plan
    mark_ranked_by_request_time(env.study)
    # a thinking model's workload: short prompts, long answers (4000 tokens) at both decode points
    save_request_mix(env.study, RequestMix(tuple(RequestKind(kind="math", context_tokens=c, weight=0.5, prompt_tokens=p,
                                                             answer_tokens=4000) for c, p in ((1024, 512), (8192, 1024)))))
    FakeLauncher(speeds={"*": (100.0, 1000.0), env.digest(FAST): (96.25, 1600.0)}, wobble=WOBBLE).install(monkeypatch)
    env.baseline_done(rates=objective_rates(bench_result(plan, 100.0, 1000.0)))
    finalist = env.add_trial(FAST, (120.0, 1600.0), rates=objective_rates(bench_result(plan, 120.0, 1600.0)))
    champion = confirm_finalists(env.plan, env.study, env.space, env.db)
    [row] = [r for r in env.db.finalists(study="stages") if r["trial"] == finalist]
    ratios = {p["metric"].split("@")[0]: p["ratio"] for p in row["verdict"]["speed"]["points"]}
    assert ratios["prefill_tok_per_s_server"] == pytest.approx(1.6, abs=0.03) and \
        ratios["decode_tok_per_s_client"] == pytest.approx(0.9625, abs=0.02)
    assert row["verdict"]["speedup"] == pytest.approx(0.970, abs=0.01) and row["verdict"]["qualified"] is False
    assert champion.is_baseline
    assert f"closest, trial {finalist}: not shown faster: request time" in load_champion(env.study)["reason"]


def test_a_finalist_with_one_fast_outlier_launch_is_not_crowned_on_it(tmp_path, small_model, monkeypatch):
    """One finalist has one fast outlier launch: by its fastest launch (or its mean) it would be crowned; its own
    launches' spread says it is not shown faster, and the steady finalist is crowned."""
    env = StageEnv.make(tmp_path, small_model, finalists=2, finalist_launches=3, finalist_max_launches=3)
    outlier, steady = FAST, SLOW
    FakeLauncher(speeds={"*": (100.0, 1000.0), env.digest(outlier): [(200.0, 1000.0), (105.0, 1000.0), (104.0, 1010.0)],
                         env.digest(steady): (112.0, 1000.0)}, wobble=WOBBLE).install(monkeypatch)
    env.baseline_done()
    lucky = env.add_trial(outlier, (115.0, 1000.0))
    chosen = env.add_trial(steady, (114.0, 1010.0))
    champion = confirm_finalists(env.plan, env.study, env.space, env.db)
    verdicts = {r["trial"]: r["verdict"] for r in env.db.finalists(study="stages") if not r["verdict"].get("baseline")}
    assert verdicts[chosen]["qualified"] and not verdicts[lucky]["qualified"]
    assert verdicts[lucky]["reason"].startswith("not shown faster")
    assert champion.trial == chosen and champion.decode_tok_per_s == pytest.approx(112.0, rel=0.01)
    assert champion.speedup == pytest.approx(math.sqrt(1.12), rel=0.01)


def test_results_md_states_the_verdicts_rule_its_error_rates_and_the_pooled_spread(env, monkeypatch):
    """Under the champion: how "faster" was decided and how often it errs at this study's own noise (simulated on
    the round the finalists ran); in the baseline's section, the spread over every baseline launch."""
    from autoresearch.report.results_md import render
    from autoresearch.report.snapshot import read_snapshot

    plan = env.plan.bench_plan
    mark_ranked_by_request_time(env.study)
    save_request_mix(env.study, RequestMix(tuple(RequestKind(kind="math", context_tokens=c, weight=0.5,
                                                             prompt_tokens=p, answer_tokens=400)
                                                 for c, p in ((1024, 512), (8192, 1024)))))
    FakeLauncher(speeds={"*": (100.0, 1000.0), env.digest(FAST): (130.0, 1300.0)}, wobble=WOBBLE).install(monkeypatch)
    env.baseline_done(rates=objective_rates(bench_result(plan, 100.0, 1000.0)))
    _more_baseline_launches(env, [(101.0, 1012.0), (99.0, 990.0)])
    env.add_trial(FAST, (130.0, 1300.0), rates=objective_rates(bench_result(plan, 130.0, 1300.0)))
    champion = confirm_finalists(env.plan, env.study, env.space, env.db)
    assert not champion.is_baseline
    text = render(read_snapshot(env.plan, env.study, env.db, env.store))
    how = next(line for line in text.splitlines() if line.startswith('How "faster" was decided'))
    assert "request time shown above 1.02x; a point shown more than 3% slower vetoes" in how
    assert "Its spread was pooled from 5 launches of the baseline." in how
    assert "Error rates: at this study's noise (5 baseline launches), a configuration equal to the baseline would " \
           "be crowned in " in how and "a real uniform speed-up is confirmed: 1.10x in " in how
    spread = next(line for line in text.splitlines() if line.startswith("Launch-to-launch spread"))
    assert "(5: baseline launch 0, baseline launch 1, drift check before trial 1, finalists round 1, launch 0, " \
           "finalists round 1, launch 1)" in spread
