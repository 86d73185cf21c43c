"""Kill -9 the loop in the middle of a trial, start it again: the study continues and nothing is lost."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import optuna
import pytest

from .conftest import FAST, loop_env

pytestmark = pytest.mark.slow


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_kill_9_mid_trial_then_resume(tmp_path, loop_cache):
    env = loop_env(loop_cache)
    cmd = [sys.executable, "-m", "autoresearch", "--trials", "3", "--heartbeat", "1", "--grace", "3", *FAST]
    log = open(tmp_path / "first.log", "w")  # noqa: SIM115
    first = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"sqlite:///{tmp_path / 'results.db'}"
    killed_trial, server_pids = None, []
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and killed_trial is None:
        time.sleep(1.0)
        assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
        try:
            study = optuna.load_study(study_name=optuna.get_all_study_names(url)[0], storage=url)
        except (IndexError, KeyError, Exception):
            continue
        for t in study.get_trials():
            if t.state == optuna.trial.TrialState.RUNNING and t.number >= 1 and t.user_attrs.get("stage") == "bench":
                killed_trial = t.number
    assert killed_trial is not None, "trial 1 never reached its bench stage"
    server_pids = [int(p.stem) for p in (tmp_path / "runs").rglob("servers/*.pid")]
    first.send_signal(signal.SIGKILL)
    first.wait()
    log.close()
    assert server_pids and all(_alive(p) for p in server_pids)  # the orphan the next run must stop

    second = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1500)
    assert second.returncode == 0, second.stderr[-5000:]
    assert not any(_alive(p) for p in server_pids)
    study = optuna.load_study(study_name=optuna.get_all_study_names(url)[0], storage=url)
    trials = study.get_trials()
    killed = trials[killed_trial]
    assert killed.state == optuna.trial.TrialState.FAIL  # its heartbeat went stale
    retries = [t for t in trials if t.system_attrs.get("failed_trial") == killed_trial]
    assert retries and retries[0].params == killed.params  # the retry re-ran the same configuration
    assert retries[0].state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    baselines = [t for t in trials if t.user_attrs.get("role") == "baseline"]
    assert len(baselines) == 1 and baselines[0].state == optuna.trial.TrialState.COMPLETE  # not measured twice
    counted = [t for t in trials if t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)]
    assert len(counted) == 3
    assert (tmp_path / "RESULTS.md").exists()


def _wait_for_stage(proc: subprocess.Popen, url: str, log_path, stage: str, min_number: int = 1) -> int:
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        time.sleep(1.0)
        assert proc.poll() is None, log_path.read_text()[-3000:]
        try:
            study = optuna.load_study(study_name=optuna.get_all_study_names(url)[0], storage=url)
        except Exception:  # not created yet
            continue
        for t in study.get_trials():
            if t.state == optuna.trial.TrialState.RUNNING and t.number >= min_number and t.user_attrs.get("stage") == stage:
                return t.number
    raise AssertionError(f"no trial reached its {stage} stage")


@pytest.mark.long
@pytest.mark.timeout(3600)  # three runs of the loop on 2 shared cores
def test_ctrl_c_mid_trial_is_one_line_and_the_trial_runs_again_on_resume(tmp_path, loop_cache):
    """Before: Ctrl-C printed ~60 lines of KeyboardInterrupt traceback, and the trial in flight stayed FAIL and
    was never retried (kill -9's was); the rerun of a finished study ran nothing and said nothing."""
    env = loop_env(loop_cache)
    cmd = [sys.executable, "-m", "autoresearch", "--trials", "3", *FAST]
    url = f"sqlite:///{tmp_path / 'results.db'}"
    log_path = tmp_path / "first.log"
    with open(log_path, "w") as log:
        first = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
        interrupted = _wait_for_stage(first, url, log_path, "bench")
        first.send_signal(signal.SIGINT)
        assert first.wait(timeout=120) == 130
    out = log_path.read_text()
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out[-3000:]
    assert out.strip().splitlines()[-1].startswith("interrupted: the study is saved")
    assert not list((tmp_path / "runs").rglob("servers/*.pid"))  # its server was stopped

    second = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1500)
    assert second.returncode == 0, second.stderr[-5000:]
    assert f"trial {interrupted} was interrupted (Ctrl-C): it runs again" in second.stderr
    study = optuna.load_study(study_name=optuna.get_all_study_names(url)[0], storage=url)
    trials = study.get_trials()
    assert trials[interrupted].state == optuna.trial.TrialState.FAIL
    retries = [t for t in trials if t.system_attrs.get("failed_trial") == interrupted]
    assert len(retries) == 1 and retries[0].params == trials[interrupted].params
    assert retries[0].state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    assert len([t for t in trials if t.state in (optuna.trial.TrialState.COMPLETE,
                                                 optuna.trial.TrialState.PRUNED)]) == 3

    third = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert third.returncode == 0, third.stderr[-3000:]
    assert "is finished: it has 3 trials (--trials 3); to extend it, run the same command with --trials N, N > 3" \
        in third.stderr
    assert len(optuna.load_study(study_name=study.study_name, storage=url).get_trials()) == len(trials)
