"""The finalists' round: who is a finalist, what it waits for, which noise floor it judges with, and a
holder that lost its claim writes nothing. The launcher and bench are `fakes.FakeLauncher`."""

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
from bench import noise_floor
from results.schema import claims

from .fakes import FakeLauncher, bench_result
from .stage_env import StageEnv

FAST = {"max_chunk_size": 4096}
SLOW = {"max_chunk_size": 1024}


@pytest.fixture
def env(tmp_path, small_model) -> StageEnv:
    return StageEnv.make(tmp_path, small_model, finalists=2, finalist_launches=1)


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


def _stored_floor(env: StageEnv, rel: float) -> dict[str, float]:
    """The search's baseline speed floor, from two scripted launches `rel` apart at every point."""
    plan = env.plan.bench_plan
    floor = noise_floor(bench_result(plan, 100.0, 1000.0).samples(),
                        bench_result(plan, 100.0 * (1 + rel), 1000.0 * (1 + rel)).samples())
    return floor.to_dict()


def test_a_one_launch_round_judges_with_the_searchs_noise_floor(env, monkeypatch):
    FakeLauncher(speeds={env.digest(): (100.0, 1000.0), env.digest(FAST): (104.0, 1040.0)}).install(monkeypatch)
    floor = _stored_floor(env, 0.10)
    env.baseline_done(floor=floor)
    env.add_trial(FAST, (110.0, 1100.0))
    champion = confirm_finalists(env.plan, env.study, env.space, env.db)
    rows = env.db.finalists(study="stages")
    [base] = [r for r in rows if r["verdict"].get("baseline")]
    assert base["verdict"]["noise_floor"] == pytest.approx(floor)
    assert base["verdict"]["noise_floor_from"] == "the search's baseline"
    # 4% faster in one launch is within a 10% launch-to-launch floor: not confirmed
    assert champion.is_baseline and "not shown faster" in [r for r in rows if r["trial"] != 0][0]["verdict"]["reason"]


def test_a_holder_whose_claim_was_taken_over_mid_round_writes_no_decision(env, monkeypatch):
    def taken_over(config) -> None:  # while this worker's first launch runs, another takes the claim
        with env.db.engine.begin() as conn:
            conn.execute(update(claims).values(worker="host-b:22"))

    FakeLauncher(speeds={"*": (100.0, 1000.0), env.digest(FAST): (150.0, 1500.0)},
                 on_launch=taken_over).install(monkeypatch)
    env.baseline_done(floor=_stored_floor(env, 0.01))
    env.add_trial(FAST, (150.0, 1500.0))
    plan = dataclasses.replace(env.plan, heartbeat_s=3600)  # no beat happens: only the write can notice
    with pytest.raises(ConfirmedElsewhere, match="taken over"):
        confirm_finalists(plan, env.study, env.space, env.db)
    assert env.db.finalists(study="stages") == [] and load_champion(env.study) is None
    [row] = env.db.claim_rows(study="stages")
    assert row["worker"] == "host-b:22" and row["finished_at"] is None


def test_a_holder_writes_its_decision_and_finishes_its_claim_in_one_go(env, monkeypatch):
    FakeLauncher(speeds={"*": (100.0, 1000.0), env.digest(FAST): (150.0, 1500.0)}).install(monkeypatch)
    env.baseline_done(floor=_stored_floor(env, 0.01))
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
    env = StageEnv.make(tmp_path, small_model, finalists=1, finalist_launches=1)
    plan = env.plan.bench_plan
    mark_ranked_by_request_time(env.study)
    # a thinking model's workload: short prompts, long answers (4000 tokens) at both decode points
    save_request_mix(env.study, RequestMix(tuple(RequestKind(kind="math", context_tokens=c, weight=0.5, prompt_tokens=p,
                                                             answer_tokens=4000) for c, p in ((1024, 512), (8192, 1024)))))
    FakeLauncher(speeds={"*": (100.0, 1000.0), env.digest(FAST): (96.25, 1600.0)}).install(monkeypatch)
    env.baseline_done(floor=_stored_floor(env, 0.02), rates=objective_rates(bench_result(plan, 100.0, 1000.0)))
    finalist = env.add_trial(FAST, (120.0, 1600.0), rates=objective_rates(bench_result(plan, 120.0, 1600.0)))
    champion = confirm_finalists(env.plan, env.study, env.space, env.db)
    [row] = [r for r in env.db.finalists(study="stages") if r["trial"] == finalist]
    assert {c["metric"].split("@")[0]: c["verdict"] for c in row["verdict"]["comparisons"]} == {
        "decode_tok_per_s_client": "same", "prefill_tok_per_s_server": "faster"}
    assert row["verdict"]["speedup"] == pytest.approx(0.970, abs=0.001) and row["verdict"]["qualified"] is False
    assert champion.is_baseline
    assert f"closest, trial {finalist}: not shown faster: request time" in load_champion(env.study)["reason"]


def test_the_champion_is_picked_on_each_finalists_median_launch_not_its_fastest(tmp_path, small_model, monkeypatch):
    """One finalist has one fast outlier launch: by its fastest launch it would be crowned, by its median it is not."""
    env = StageEnv.make(tmp_path, small_model, finalists=2, finalist_launches=3)
    outlier, steady = FAST, SLOW
    FakeLauncher(speeds={"*": (100.0, 1000.0), env.digest(outlier): [(200.0, 1000.0), (105.0, 1000.0), (105.0, 1000.0)],
                         env.digest(steady): (112.0, 1000.0)}).install(monkeypatch)
    env.baseline_done(floor=_stored_floor(env, 0.005))
    lucky = env.add_trial(outlier, (115.0, 1000.0))
    chosen = env.add_trial(steady, (114.0, 1010.0))
    champion = confirm_finalists(env.plan, env.study, env.space, env.db)
    verdicts = {r["trial"]: r["verdict"] for r in env.db.finalists(study="stages") if not r["verdict"].get("baseline")}
    assert all(v["qualified"] for v in verdicts.values())  # both confirmed faster; the median ranks them
    assert verdicts[lucky]["decode"] == pytest.approx(105.0)  # its median launch, as RESULTS.md shows it
    assert champion.trial == chosen and champion.decode_tok_per_s == pytest.approx(112.0)
    assert champion.speedup == pytest.approx(math.sqrt(1.12))
