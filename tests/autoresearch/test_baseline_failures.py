"""A baseline fails like any trial, with its reason in the trial, and stops the study: nothing can be
judged against it. Its task suite is run once more when it had operational failures."""

from __future__ import annotations

import optuna
import pytest

from autoresearch.baseline import _reference_suite
from autoresearch.errors import BaselineFailed, BaselineUnmeasured
from autoresearch.outcome import TrialOutcome
from autoresearch.report import write_report
from eval.decision import TaskPolicy
from eval.records import EpisodeOutcome, SuiteResult, TasksetResult
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


def _taskset(failed: int, n: int = 600) -> TasksetResult:
    """A judged-size taskset, correct on every other task; the first `failed` episodes failed operationally."""
    episodes = tuple(EpisodeOutcome(task_key=f"t{i:04d}", task_idx=i, ok=i >= failed,
                                    reward=None if i < failed else float(i % 2 == 0), truncated=False, output_tokens=10,
                                    model_time_s=0.1, error="ProviderError: down" if i < failed else None,
                                    started_at=1000.0 + i)
                     for i in range(n))
    ok = [e for e in episodes if e.ok]
    return TasksetResult(name="rg-math", taskset_id="rg-math", max_tokens=4096, tasks=n, rollouts=n,
                         failures=n - len(ok), truncations=0, reward_mean=sum(e.reward for e in ok) / len(ok),
                         output_tokens=10 * n, model_time_s=0.1 * n, output_tok_per_s=100.0, run_dir="/runs/x",
                         episodes=episodes)


def _suite(failed: int) -> SuiteResult:
    return SuiteResult(suite="offline", run_dir="/runs/x", tasksets=(_taskset(failed),))


def test_a_baseline_suite_run_with_failures_is_run_once_more():
    runs = [_suite(failed=3), _suite(failed=0)]
    attempts: list[int] = []

    def run(attempt: int) -> SuiteResult:
        attempts.append(attempt)
        return runs[attempt]

    policy = TaskPolicy(max_candidate_failures=0)
    assert _reference_suite(run, policy) is runs[1] and attempts == [0, 1]
    runs[1] = _suite(failed=2)  # failed again: it cannot be the reference
    attempts.clear()
    with pytest.raises(BaselineUnmeasured, match="failed operationally") as caught:
        _reference_suite(run, policy)
    assert attempts == [0, 1] and (caught.value.constraint, caught.value.outcome) == ("tasks", "baseline_tasks_invalid")
    assert _reference_suite(lambda attempt: _suite(failed=0), policy).tasksets[0].failures == 0
