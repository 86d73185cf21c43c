"""--hours is the night: the loop stops searching early enough that the whole run (finalists, their judgments,
the minimization and its gate, the report) ends by the deadline, on the plan its display shows; where a stage
overruns, the minimization shrinks first, and RESULTS.md says so.

Each night runs on real parts with a scripted clock (tests.autoresearch.night_env): the search alone would fill
the hours many times over (each trial takes about 4 scripted minutes, and the space has millions)."""

from __future__ import annotations

import optuna

from autoresearch.ground.stages import FINALISTS, MINIMIZE, TASKS
from autoresearch.night.clock import NIGHT_KEY
from eval import GatePolicy
from eval.task_decision import TaskPolicy

from .night_env import NightEnv

SMOKE = GatePolicy(tasks=TaskPolicy(mode="smoke"))  # the tier answers every task, as the embedded default's
HOURS = 2.0


def _night(tmp_path, small_model, monkeypatch, judgment_s: float) -> tuple[NightEnv, float]:
    env = NightEnv.make(tmp_path, small_model, monkeypatch, hours=HOURS, gate_policy=SMOKE)
    env.tier.judgment_s = judgment_s
    start = env.clock.now
    assert env.run() == 0
    return env, env.clock.now - start


def test_the_search_stops_so_that_the_whole_night_ends_by_the_deadline(tmp_path, small_model, monkeypatch):
    """Before: --hours was the search's timeout alone; the search ran to the deadline and the finalists' launches,
    the judgment and the minimization ran past it (here 2 h of search, then about 45 min more)."""
    env, elapsed = _night(tmp_path, small_model, monkeypatch, judgment_s=400.0)  # the plan says 379 s
    assert elapsed <= HOURS * 3600 * 1.1
    study = env.study()
    counted = study.get_trials(states=(optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED))
    assert len(counted) >= 5  # it searched, and stopped well before the space or the hours ran out
    assert env.tier.judged and env.tier.judged[0].startswith("trial ")  # the finalist was judged
    night = study.user_attrs[NIGHT_KEY]
    assert night["ended"] and night["search_stopped"].startswith("the search stops: one more trial")
    stages = {row["stage"]: row for row in night["table"]}
    assert set(stages) >= {"search", FINALISTS, TASKS, MINIMIZE}  # the minimization ran, within its plan
    assert stages[MINIMIZE]["measured_s"] <= stages[MINIMIZE]["planned_s"]  # planned whole; it took what was left
    assert night["cuts"] == []
    text = env.plan.results_md.read_text()
    assert "## The night as run" in text and "| confirming finalists | 1,080 | 1,080 | 1,080 | 1 |" in text
    assert "The search stopped for the stages after it to end by the deadline" in text


def test_every_stage_shows_an_eta_from_the_plan_and_the_study_eta_covers_the_stages_left(tmp_path, small_model,
                                                                                       monkeypatch):
    """Before: the study's ETA was trials left x time per trial (0 s during the finalists' stage), and a finalist's
    judgment ran as `task tier: trial N`, a stage the plan has no estimate for (its estimate is `tasks`)."""
    env, elapsed = _night(tmp_path, small_model, monkeypatch, judgment_s=400.0)
    end = env.clock.now
    seen = {name: (at, study_eta, stage_eta) for name, at, study_eta, stage_eta in env.stages}  # the last of each
    deadline = end - elapsed + HOURS * 3600
    for name, (at, study_eta, stage_eta) in seen.items():
        assert stage_eta is not None, name  # from the plan until measured
        assert study_eta is not None and study_eta <= deadline - at + 1e-6, name  # never past the deadline
    at, study_eta, _ = seen[FINALISTS]
    # the stages left at the finalists' stage, as planned: an upper estimate (two judgments planned, one ran; the
    # minimal champion was the champion, so no gate), within 60% of the scripted remainder
    assert end - at <= study_eta <= 1.6 * (end - at)
    assert seen[TASKS][2] == env.study().user_attrs["night_plan"]["stage_s"][TASKS]  # the plan's, by the same name
    searching = [(at, eta) for name, at, eta, _ in env.stages if at < seen[FINALISTS][0] and name == "launch"][3:]
    assert all(abs(eta - (deadline - at)) < 300 for at, eta in searching)  # during the search: about the deadline


def test_a_judgment_that_overruns_shrinks_the_minimization_first_and_results_say_so(tmp_path, small_model,
                                                                                    monkeypatch):
    env, elapsed = _night(tmp_path, small_model, monkeypatch, judgment_s=1800.0)  # 5x the plan's
    night = env.study().user_attrs[NIGHT_KEY]
    assert env.tier.judged  # the finalist was judged: the claim is never cut
    assert night["cuts"] and night["cuts"][0].startswith(("minimization cut", "minimization stopped"))
    assert elapsed <= HOURS * 3600 * 1.1
    assert night["cuts"][0] in env.plan.results_md.read_text()


def test_a_short_night_searches_keeping_only_the_least_minimization_and_one_judgment(tmp_path, small_model,
                                                                                    monkeypatch):
    """The real 0.5B's 15-minute night (launch ~8 s, bench ~9 s, fidelity ~4 s, a judgment ~2.5 min): before, the
    search kept time for two judgments and the whole minimization (26 launches), stopped after the baseline, and
    the night ended in 155 s with the baseline as champion (examples/real-0.5b-night). The minimization is the
    first stage to give, so the search keeps only its ranking round and one attempt, and one judgment."""
    rates = {"launch_s": 6.0, "bench_s": 12.0, "fidelity_s": 6.0, "decode_tok_s": 25.0, "prefill_tok_s": 2000.0,
             "answer_tokens": 32.0}  # the plan's judgment: about 2.5 min, as the real night's
    env = NightEnv.make(tmp_path, small_model, monkeypatch, hours=0.25, gate_policy=SMOKE, scale=0.1,
                        minimize_launches=2, stated_rates=rates)
    env.tier.judgment_s = 150.0
    start = env.clock.now
    assert env.run() == 0
    elapsed = env.clock.now - start
    study = env.study()
    candidates = [t for t in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
                  if t.user_attrs.get("role") != "baseline"]
    assert len(candidates) >= 3, study.user_attrs[NIGHT_KEY]["search_stopped"]
    assert env.tier.judged  # a champion judged
    assert elapsed <= 0.25 * 3600 * 1.1
    night = study.user_attrs[NIGHT_KEY]
    stages = {row["stage"]: row for row in night["table"]}
    assert MINIMIZE in stages or any(c.startswith("minimization") for c in night["cuts"])

