"""A baseline fails like any trial, with its reason in the trial, and stops the study: nothing can be
judged against it. (Its task suite's answers are answered once more when they had operational failures:
tests/autoresearch/test_task_tier.py, where the lazy baseline answers.)"""

from __future__ import annotations

import optuna
import pytest

from autoresearch.errors import BaselineFailed
from autoresearch.outcome import TrialOutcome
from autoresearch.report import write_report
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
