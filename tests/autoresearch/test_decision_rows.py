"""One decision row per candidate, always: also when its task tier cannot run after fidelity passed.

Real parts: Optuna, the trial runner's stages, the results store, the gate. Test doubles at the outside
boundary only: the launcher and bench (tests.autoresearch.fakes.FakeLauncher), what the server's logprobs
give the fidelity probes (a scripted lossless measurement saved to the real store), and the task tier's
seam (autoresearch.checks.judging.TierRunner.judge), which here cannot run: a server it needs does not start,
or the candidate's server dies under the suite.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import autoresearch.trial.runner as trial_module
from autoresearch.checks.judging import TierRunner
from autoresearch.trial import baseline_protocol
from eval.errors import TasksetRunError
from eval.fidelity import load_fidelity_measurement
from eval.records import FidelityMetrics
from serving.errors import ServerCrashed

from .fakes import FakeLauncher
from .stage_env import StageEnv

CHANGE = {"max_chunk_size": 4096}


def _lossless_fidelity(monkeypatch) -> None:
    def measure(url, reference, *, store, role, label):
        metrics = FidelityMetrics(n_probes=1, n_positions=1, kl_mean=1e-5, kl_p99=1e-4, kl_max=1e-4,
                                  top1_agreement=1.0, greedy_match_fraction=1.0, greedy_full_matches=1,
                                  ref_token_logprob_delta_mean=0.0)
        mid = store.save_measurement(reference_id=reference.reference_id, role=role, label=label, metrics=metrics,
                                     per_probe=[{"probe_id": "p0"}], elapsed_s=0.5, server={})
        return load_fidelity_measurement(store, mid)

    for module in (trial_module, baseline_protocol):
        monkeypatch.setattr(module, "measure_fidelity", measure)


class _Tier:
    """The tier's seam: `fails` is what its judge raises (after stopping the candidate's server, where told)."""

    def __init__(self, fails: Exception, *, release: bool):
        self.fails, self.release = fails, release

    def judge(self, study, *, trial, label, config, baseline, fidelity, server, release, **_):
        if self.release:
            release()
        raise self.fails


def _rows(env: StageEnv, trial) -> list[dict]:
    return [d for d in env.store.decision_rows() if d["candidate_label"] == trial.user_attrs["gate_label"]]


@pytest.mark.parametrize("how", ["a server it needs does not start", "the candidate's server dies under the suite"])
def test_a_candidate_whose_task_tier_cannot_run_leaves_one_row_saying_why(tmp_path, small_model, monkeypatch, how):
    """Before: fidelity's pass was not saved (a tier followed) and the tier ended the trial: no row at all."""
    env = StageEnv.make(tmp_path, small_model, task_tier_scope="every")
    crash = ServerCrashed("exited with -9", log_tail="Killed")
    dies = how.startswith("the candidate's")
    FakeLauncher(dies={env.digest(CHANGE): crash} if dies else {}).install(monkeypatch)
    _lossless_fidelity(monkeypatch)
    env.baseline_done()
    env.runner.tier = _Tier(TasksetRunError("the rg-math run exited") if dies else ServerCrashed(
        "the baseline's server for the answers exited with -9", log_tail="Killed"), release=not dies)

    trial = env.run(CHANGE)

    [row] = _rows(env, trial)
    assert not row["passed"] and row["failed_stage"] == "tasks" and row["evidence"]["fidelity"]["passed"]
    assert row["reasons"][0].startswith("tasks could not be judged: ") and "exited with -9" in row["reasons"][0]
    assert trial.user_attrs["gate_decision_id"] == row["id"]


def test_a_pending_finalist_whose_task_tier_cannot_run_has_its_passing_fidelity_row_replaced(tmp_path, small_model,
                                                                                            monkeypatch):
    """Before: the finalists' stage could not judge it, and its one row still read 'passed' (fidelity's)."""
    env = StageEnv.make(tmp_path, small_model)  # --task-tier-scope finalists: fidelity's pass is saved
    FakeLauncher().install(monkeypatch)
    _lossless_fidelity(monkeypatch)
    env.baseline_done()
    env.runner.tier = SimpleNamespace()  # pending: judged by the finalists' stage
    trial = env.run(CHANGE)
    [before] = _rows(env, trial)
    assert before["passed"]

    def cannot_launch(*_, **__):
        raise ServerCrashed("the finalist's server exited with -11", log_tail="Segmentation fault")

    runner = object.__new__(TierRunner)  # the real runner's judging, with a launch that crashes
    runner.plan, runner.store, runner.db, runner.judge = env.plan, env.store, env.db, cannot_launch
    verdict = runner.judge_pending(env.study, env.study.trials[trial.number])

    [row] = _rows(env, trial)
    assert not verdict["passed"] and verdict["decision_id"] == row["id"] == before["id"]
    assert not row["passed"] and row["failed_stage"] == "tasks"
    assert row["reasons"] == ["tasks could not be judged: ServerCrashed: the finalist's server exited with -11"]


class _Judges:
    """The tier's seam, working again: the fidelity verdict as the candidate's one row (what a suite that
    passed adds to it is eval's, tested there)."""

    def __init__(self, env: StageEnv):
        self.env = env

    def judge(self, study, *, trial, label, config, baseline, fidelity, **_):
        from eval import gate_candidate

        env = self.env
        return gate_candidate(env.store, model_manifest_hash=env.plan.model.manifest_hash, candidate_label=label,
                              baseline_label=baseline.label, policy=env.plan.gate_policy,
                              floor=baseline.fidelity_floor, candidate_fidelity=fidelity), None


@pytest.mark.parametrize("fails", ["a taskset run errs, the server alive", "a taskset run errs after the release",
                                   "the lazy baseline cannot be measured", "Ctrl-C"])
def test_an_evaluator_failure_interrupts_the_trial_and_the_next_run_judges_it(tmp_path, small_model, monkeypatch,
                                                                                fails):
    """Before: the error ended the trial FAIL with no decision row and no mark, so no resume retried it."""
    from autoresearch.ground.errors import BaselineUnmeasured
    from autoresearch.ground.study import retry_interrupted

    env = StageEnv.make(tmp_path, small_model, task_tier_scope="every")
    FakeLauncher().install(monkeypatch)
    _lossless_fidelity(monkeypatch)
    env.baseline_done()
    error = {"a taskset run errs, the server alive": TasksetRunError("verifiers' rg-math worker exited 1"),
             "a taskset run errs after the release": TasksetRunError("verifiers' rg-math worker exited 1"),
             "the lazy baseline cannot be measured": BaselineUnmeasured(
                 "the baseline's answers cannot be the reference: 3 failed episodes", constraint="tasks",
                 outcome="baseline_tasks_invalid"),
             "Ctrl-C": KeyboardInterrupt()}[fails]
    env.runner.tier = _Tier(error, release=fails.endswith("after the release"))

    with pytest.raises(type(error)):  # the loop stops and says why
        env.run(CHANGE)

    [interrupted] = env.study.get_trials(deepcopy=False)[-1:]
    assert interrupted.state.name == "FAIL" and interrupted.user_attrs["interrupted_in"] == interrupted.number
    [row] = _rows(env, interrupted)  # one row, saying why it was not judged
    assert not row["passed"] and row["failed_stage"] == "tasks" and row["evidence"]["fidelity"]["passed"]
    assert "interrupted" in row["reasons"][0] and "the next run judges it again" in row["reasons"][0]
    assert interrupted.user_attrs["gate_decision_id"] == row["id"]

    assert retry_interrupted(env.study) == [interrupted.number]  # what the next run does first
    env.runner.tier = _Judges(env)
    env.study.optimize(env.runner, n_trials=1, catch=())
    retried = env.study.get_trials(deepcopy=False)[-1]
    assert retried.number != interrupted.number and retried.params == interrupted.params
    assert retried.user_attrs["outcome"] == "passed"
    [judged] = _rows(env, retried)
    assert judged["passed"] and retried.user_attrs["gate_decision_id"] == judged["id"]


def test_a_finalist_whose_smoke_run_completes_is_recorded_as_judging_nothing(tmp_path, small_model, monkeypatch):
    """Before: its trial's reasons read "task tier passed (judged by the finalists' stage)" while RESULTS.md said,
    rightly, that a smoke task tier judged nothing."""
    import datetime

    from autoresearch.checks.judging import SMOKE_RUN
    from autoresearch.report.results_md import render_section
    from eval import GatePolicy, TaskPolicy, gate_candidate

    env = StageEnv.make(tmp_path, small_model, suite="offline", gate_policy=GatePolicy(tasks=TaskPolicy(mode="smoke")))
    FakeLauncher().install(monkeypatch)
    _lossless_fidelity(monkeypatch)
    env.baseline_done()
    env.runner.tier = SimpleNamespace()  # pending: judged by the finalists' stage
    trial = env.run(CHANGE)

    def smoke_run_completes(study, *, trial, label, config, baseline, fidelity, replace_id, **_):
        gate = gate_candidate(env.store, model_manifest_hash=env.plan.model.manifest_hash, candidate_label=label,
                              baseline_label=baseline.label, policy=env.plan.gate_policy, floor=baseline.fidelity_floor,
                              candidate_fidelity=fidelity, replace_id=replace_id)
        return gate, SimpleNamespace(verdicts=(), baseline_answered={}, candidate_answered={})

    runner = object.__new__(TierRunner)  # the real runner's judging, its smoke run's answers not what is tested
    runner.plan, runner.store, runner.db, runner.judge = env.plan, env.store, env.db, smoke_run_completes
    verdict = runner.judge_pending(env.study, env.study.trials[trial.number])

    stored = env.study.trials[trial.number].user_attrs
    assert verdict["passed"] and stored["outcome"] == "passed" and stored["reasons"][-1] == SMOKE_RUN
    assert not any("task tier passed" in r for r in stored["reasons"])
    header = render_section("header", SimpleNamespace(
        plan=env.plan, generated=datetime.datetime(2026, 12, 4), stopped=None, ranking="request time", mix=None,
        suite_concurrency=None, fidelity_gate={"noise_factor": 3, "min_floor_kl_mean": 1e-4, "min_floor_kl_p99": 1e-3,
                                               "min_floor_top1_disagreement": 0.002}))
    assert "judged nothing" in header and "nothing judged" in SMOKE_RUN  # the store and the prose agree
