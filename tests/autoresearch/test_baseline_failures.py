"""The baseline's two launches, in their order; and a baseline fails like any trial, with its reason in
the trial, and stops the study: nothing can be judged against it. (Its task suite's answers are answered
once more when they had operational failures: tests/autoresearch/test_task_tier.py, where the lazy
baseline answers.)"""

from __future__ import annotations

from types import SimpleNamespace

import optuna
import pytest

from autoresearch.ground.errors import BaselineFailed, BaselineUnmeasured
from autoresearch.ground.outcome import TrialOutcome
from autoresearch.report.results_md import write_report
from autoresearch.trial import baseline_protocol
from serving.errors import OutOfMemoryAtLoad

from .fakes import FakeLauncher
from .stage_env import GIB, StageEnv, constraints


def _fail_baseline(env: StageEnv) -> optuna.trial.FrozenTrial:
    with pytest.raises(BaselineFailed) as caught:
        env.run(None, role="baseline")
    trial = env.study.get_trials()[-1]
    assert trial.state == optuna.trial.TrialState.FAIL  # the study stops; a later run retries it
    assert str(caught.value) in trial.user_attrs["reasons"][-1] or trial.user_attrs["reasons"][-1] in str(caught.value)
    return trial


def test_the_baseline_is_measured_first_in_both_launches_then_reference_suite_and_floor(tmp_path, small_model,
                                                                                       monkeypatch):
    env = StageEnv.make(tmp_path, small_model)
    calls: list[str] = []
    launcher = FakeLauncher(on_launch=lambda config: calls.append(f"launch {len(launcher.launches) - 1}"),
                            watts={"*": [300.0, 330.0]})  # the second launch drew 10% more at the same speed
    launcher.install(monkeypatch)
    monkeypatch.setattr("autoresearch.ground.plan.run_bench",
                        lambda *a, **kw: calls.append("bench") or launcher.run_bench(*a, **kw))
    # stand-ins for eval's calls on the fake server (it answers nothing) and for the suite's first answers
    reference = SimpleNamespace(model_manifest_hash="h", probe_set_digest="d")
    monkeypatch.setattr(baseline_protocol, "capture_reference", lambda url, probes, **kw: calls.append("capture") or reference)
    monkeypatch.setattr(baseline_protocol, "measure_fidelity", lambda url, ref, **kw: calls.append(f"floor:{kw['label']}")
                        or SimpleNamespace(measurement_id=1, metrics={}))
    suite_ok = SimpleNamespace(suite_run_id=7, tasksets=())
    env.runner.tier = SimpleNamespace(baseline_first=lambda server, **kw: calls.append("suite") or suite_ok)
    trial = env.run(None, role="baseline")
    assert calls == ["launch 0", "bench", "capture", "suite", "launch 1", "bench", "floor:stages:baseline#2"]
    assert list(trial.user_attrs["stage_s"]) == ["feasibility", "launch", "bench", "reference", "tasks",
                                                 "relaunch", "bench again", "noise floor"]
    assert TrialOutcome.of(trial) is TrialOutcome.BASELINE and launcher.benched == [env.digest()] * 2
    assert env.study.user_attrs["baseline_evidence"]["suite_run_id"] == 7
    # the two launches' floors side by side: speed the same, tokens per joule 300/330 apart at every point
    evidence = env.study.user_attrs["baseline_evidence"]
    assert set(evidence["speed_floor"].values()) == {0.0}
    assert len(evidence["energy_floor"]) == 3 and evidence["energy_floor"] == pytest.approx(
        dict.fromkeys(evidence["energy_floor"], 1 - 300 / 330))


def test_a_baseline_that_cannot_be_measured_says_which_launch_and_why(tmp_path, small_model, monkeypatch):
    env = StageEnv.make(tmp_path, small_model)
    launcher = FakeLauncher(speeds={"*": None}).install(monkeypatch)
    with pytest.raises(BaselineUnmeasured, match=r"launch 0\): decode_tok_per_s_client@1024") as caught:
        env.run(None, role="baseline")
    assert (caught.value.constraint, caught.value.outcome) == ("measured", "unmeasured")
    assert len(launcher.launches) == 1  # no reference, no second launch


def test_a_baseline_that_cannot_fit_is_refused_before_any_launch(tmp_path, small_model, monkeypatch):
    env = StageEnv.make(tmp_path, small_model, vram_bytes=GIB * 6 // 10)
    launcher = FakeLauncher().install(monkeypatch)
    trial = _fail_baseline(env)
    assert TrialOutcome.of(trial) is TrialOutcome.INFEASIBLE and launcher.launches == []
    assert "exceeds the usable" in trial.user_attrs["reasons"][0] and constraints(trial)["fits"] > 0
    write_report(env.plan, env.study, env.db, env.store)
    top = env.plan.results_md.read_text().split("##")[0]
    assert "**The study stopped: predicted peak" in top and "not launched" in top


def test_a_baseline_that_runs_out_of_memory_at_load_says_so(tmp_path, small_model, monkeypatch):
    env = StageEnv.make(tmp_path, small_model)
    oom = OutOfMemoryAtLoad("CUDA out of memory while loading", log_tail="torch.OutOfMemoryError: 2 GiB")
    FakeLauncher(fails={env.digest(): oom}).install(monkeypatch)
    trial = _fail_baseline(env)
    assert TrialOutcome.of(trial) is TrialOutcome.OOM_AT_LOAD and trial.user_attrs["failure"] == "oom_at_load"
    assert constraints(trial)["launch_ok"] > 0 and "torch.OutOfMemoryError" in trial.user_attrs["log_tail"]
    [row] = env.db.measurements(study="stages", kind="launch", trial=trial.number)
    assert row["payload"]["reason"] == "oom_at_load"
    write_report(env.plan, env.study, env.db, env.store)
    assert "**The study stopped: oom_at_load: CUDA out of memory while loading" in env.plan.results_md.read_text()


def test_a_baseline_that_cannot_be_measured_stops_with_its_points(tmp_path, small_model, monkeypatch):
    env = StageEnv.make(tmp_path, small_model)
    FakeLauncher(speeds={"*": None}).install(monkeypatch)
    trial = _fail_baseline(env)
    assert TrialOutcome.of(trial) is TrialOutcome.UNMEASURED
    assert "the baseline could not be measured (launch 0): decode_tok_per_s_client@1024/math" in \
        trial.user_attrs["reasons"][0]


def test_a_baseline_whose_reference_cannot_be_captured_says_so(tmp_path, small_model, monkeypatch):
    env = StageEnv.make(tmp_path, small_model)
    FakeLauncher().install(monkeypatch)  # measured; then its server answers no probe
    trial = _fail_baseline(env)
    assert TrialOutcome.of(trial) is TrialOutcome.EVAL_ERROR and constraints(trial)["fidelity"] > 0
    assert trial.user_attrs["reasons"][0].startswith("the baseline's reference stage failed: EndpointError: GET")
