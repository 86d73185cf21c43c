"""One configuration is measured once: the lowest-numbered live trial of a digest measures it, the others
are pruned as its duplicates, whichever worker looks first; and workers do not share a sampler seed."""

from __future__ import annotations

import threading
import time

import optuna
import pytest

from autoresearch.ground.outcome import TrialOutcome
from autoresearch.ground.study import sampler_seed

from .fakes import FakeLauncher
from .stage_env import StageEnv

CHANGE = {"max_chunk_size": 4096}


@pytest.fixture
def env(tmp_path, small_model, monkeypatch) -> StageEnv:
    env = StageEnv.make(tmp_path, small_model)
    env.baseline_done()
    return env


def _mid_trial(env: StageEnv, changes: dict, *, chosen: bool = True) -> optuna.Trial:
    """Another worker's trial, asked and RUNNING; `chosen`: it has written its configuration's digest, as
    the runner does before anything else."""
    env.study.enqueue_trial(env.params(changes), user_attrs={"role": "candidate"})
    trial = env.study.ask()
    if chosen:
        trial.set_user_attr("config_digest", env.digest(changes))
    return trial


def test_of_two_running_trials_of_one_configuration_the_higher_numbered_is_the_duplicate(env, monkeypatch):
    """Two workers proposed one configuration: both trials run and both wrote the digest before either
    looked ("a sees 1 | b sees 0"). The lower-numbered one measures it, whichever looks first."""
    launcher = FakeLauncher().install(monkeypatch)
    lower, higher = _mid_trial(env, CHANGE), _mid_trial(env, CHANGE)
    env.study.tell(lower, env.runner(lower))  # sees the higher one running: not its duplicate
    with pytest.raises(optuna.TrialPruned, match=f"duplicate of trial {lower.number}"):
        env.runner(higher)
    env.study.tell(higher, state=optuna.trial.TrialState.PRUNED)
    first, second = env.study.get_trials()[lower.number], env.study.get_trials()[higher.number]
    assert TrialOutcome.of(first) is not TrialOutcome.DUPLICATE and "duplicate_of" not in first.user_attrs
    assert TrialOutcome.of(second) is TrialOutcome.DUPLICATE and second.user_attrs["duplicate_of"] == lower.number
    assert second.user_attrs["reasons"] == [f"same configuration as trial {lower.number}"]
    assert launcher.launched(env.digest(CHANGE)) == 1


def test_a_trial_looking_after_the_lower_one_measured_is_its_duplicate(env, monkeypatch):
    launcher = FakeLauncher().install(monkeypatch)
    lower = _mid_trial(env, CHANGE)
    higher = env.run(CHANGE)
    assert higher.state == optuna.trial.TrialState.PRUNED and higher.user_attrs["duplicate_of"] == lower.number
    assert launcher.launches == []


def test_a_completed_trial_of_the_configuration_makes_a_new_one_a_duplicate(env, monkeypatch):
    launcher = FakeLauncher().install(monkeypatch)
    first = env.add_trial(CHANGE, (100.0, 1000.0))
    again = env.run(CHANGE)
    assert again.user_attrs["duplicate_of"] == first and launcher.launches == []
    other = env.run({"max_chunk_size": 1024})  # another configuration is measured
    assert TrialOutcome.of(other) is not TrialOutcome.DUPLICATE and len(launcher.launches) == 1


def test_a_failed_or_duplicate_trial_is_nobodys_original(env, monkeypatch):
    FakeLauncher().install(monkeypatch)
    env.add_trial(CHANGE, None, state=optuna.trial.TrialState.FAIL)  # a killed worker's trial, retried elsewhere
    dup = _mid_trial(env, CHANGE)
    dup.set_user_attr("duplicate_of", 0)  # decided already: it is pruned, it measures nothing
    trial = env.run(CHANGE)
    assert TrialOutcome.of(trial) is not TrialOutcome.DUPLICATE


def test_a_higher_numbered_trial_waits_for_a_lower_one_still_choosing_its_configuration(env, monkeypatch):
    """The race the rule must win: the higher-numbered trial looks before the lower one wrote its digest."""
    monkeypatch.setattr("autoresearch.trial.runner.DUPLICATE_POLL_S", 0.01)
    launcher = FakeLauncher().install(monkeypatch)
    lower = _mid_trial(env, CHANGE, chosen=False)
    done = threading.Event()

    def higher() -> None:
        env.run(CHANGE)
        done.set()

    thread = threading.Thread(target=higher, daemon=True)
    thread.start()
    time.sleep(0.2)
    assert not done.is_set(), "it decided without knowing what the lower-numbered trial measures"
    lower.set_user_attr("config_digest", env.digest(CHANGE))
    thread.join(timeout=10)
    trial = env.study.get_trials()[-1]
    assert trial.user_attrs["duplicate_of"] == lower.number and launcher.launches == []


def test_two_baselines_enqueued_together_run_once(env, monkeypatch):
    launcher = FakeLauncher().install(monkeypatch)
    trial = env.run(None, role="baseline")  # trial 0 is the baseline already
    assert TrialOutcome.of(trial) is TrialOutcome.DUPLICATE and trial.user_attrs["duplicate_of"] == 0
    assert launcher.launches == []


def test_workers_opening_a_study_together_get_different_sampler_seeds():
    assert sampler_seed(0, 5, "host-a:11") != sampler_seed(0, 5, "host-a:12")
    assert sampler_seed(0, 5, "host-a:11") != sampler_seed(0, 6, "host-a:11")  # a resumed run does not replay
    assert sampler_seed(0, 5, "host-a:11") == sampler_seed(0, 5, "host-a:11")
    assert 0 <= sampler_seed(2**40, 5, "host-a:11") < 2**32
