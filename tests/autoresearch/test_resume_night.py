"""A resumed night loses nothing: three Ctrl-Cs in the baseline and a kill -9 in the middle of a candidate's
trial, then a resume, leave no FAIL trial but the four interrupted ones (each run again), every configuration
measured once, and a resume that goes on at once and says why.

On real parts with the scripted doubles of tests.autoresearch.night_env. The kill -9 leaves what a killed worker
leaves: its trial RUNNING with a fresh heartbeat, owned by a process of this host that no longer exists."""

from __future__ import annotations

import logging
import socket
import subprocess
import time

import optuna
import pytest

from autoresearch.ground.db import ResultsDB
from autoresearch.ground.outcome import TrialOutcome
from eval import GatePolicy
from eval.task_decision import TaskPolicy

from .night_env import NightEnv

SMOKE = GatePolicy(tasks=TaskPolicy(mode="smoke"))


class Killed(BaseException):  # noqa: N818 - what kill -9 does to the loop: nothing after it runs, not even Optuna's tell
    pass


def test_interrupted_baselines_and_a_kill_9_then_a_resume_lose_nothing(tmp_path, small_model, monkeypatch, caplog):
    """Before: each resume first ran the waiting lever trials, which were deferred and recorded as FAIL before the
    baseline ran again (three Ctrl-Cs: 15 FAIL trials here), and the resume after a kill -9 waited --grace for a
    heartbeat to go stale, saying only "waiting for the baseline"."""
    env = NightEnv.make(tmp_path, small_model, monkeypatch, trials=4, gate_policy=SMOKE, minimize=False)
    baseline = env.machine.baseline_digest
    interrupts = {"baseline": 3, "candidate": 1}

    def interrupt(config):
        if config.digest == baseline and interrupts["baseline"]:
            interrupts["baseline"] -= 1
            raise KeyboardInterrupt  # Ctrl-C while the baseline launches
        if config.digest != baseline and not interrupts["baseline"] and interrupts["candidate"]:
            interrupts["candidate"] -= 1
            raise Killed

    env.machine.on_launch = interrupt
    for _ in range(3):
        with pytest.raises(KeyboardInterrupt):
            env.run()
    with pytest.raises(Killed):
        env.run()
    study = env.study()
    [killed] = study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
    gone = subprocess.run(["true"], check=True)  # noqa: F841 - its pid is free once it ended
    dead = subprocess.Popen(["true"])
    dead.wait()
    study._storage.set_trial_user_attr(killed._trial_id, "worker", f"{socket.gethostname()}:{dead.pid}")

    caplog.set_level(logging.INFO, logger="autoresearch")
    started = time.perf_counter()
    assert env.run() == 0
    assert time.perf_counter() - started < env.plan.grace_s  # no wait for the heartbeat to go stale
    assert f"trial {killed.number} was left running by worker" in caplog.text and "which is gone" in caplog.text

    trials = env.study().get_trials()
    failed = [t for t in trials if t.state == optuna.trial.TrialState.FAIL]
    interrupted = [t.number for t in failed if t.user_attrs.get("interrupted_in") == t.number]
    assert len(interrupted) == 3 and all(trials[n].user_attrs["role"] == "baseline" for n in interrupted)
    assert sorted(t.number for t in failed) == sorted([*interrupted, killed.number])  # no other FAIL
    retried = {n for t in trials for n in t.system_attrs.get("retry_history", ())}
    assert {t.number for t in failed} <= retried  # each ran again
    deferred = [t for t in trials if TrialOutcome.of(t) is TrialOutcome.DEFERRED]
    assert deferred and all(t.state == optuna.trial.TrialState.PRUNED for t in deferred)
    counted = [t for t in trials if t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
               and TrialOutcome.of(t) is not TrialOutcome.DEFERRED]
    assert len(counted) == 4  # --trials 4: the deferred ones are not counted
    # every configuration measured once: each digest benched in one trial (the baseline's two launches in its own)
    rows = ResultsDB(env.plan.storage_url).measurements(study=env.plan.study_name, kind="bench")
    trials_of: dict[str, set[int]] = {}
    for row in rows:
        trials_of.setdefault(row["config_digest"], set()).add(row["trial"])
    assert all(len(of) == 1 for of in trials_of.values()), trials_of
    assert len([r for r in rows if r["config_digest"] == baseline]) == 2
