"""A resumed study refuses a setting that changes what its trials measured, in one line naming the
setting, the stored value, the new one and how to start afresh; settings that only steer the search
resume as before."""

from __future__ import annotations

import dataclasses

import optuna
import pytest

from autoresearch.ground.errors import PlanError
from autoresearch.ground.study import open_study
from eval import ProbeSetConfig

from .stage_env import GIB, StageEnv


@pytest.fixture
def env(tmp_path, small_model) -> StageEnv:
    return StageEnv.make(tmp_path, small_model, pinned={"cache_tokens": 32768})


@pytest.mark.parametrize(("change", "setting", "stored", "new"), [
    ({"pinned": {"cache_tokens": 16384}}, "--pin", '{"cache_tokens": 32768}', '{"cache_tokens": 16384}'),
    ({"vram_bytes": 16 * GIB}, "--vram", str(24 * GIB), str(16 * GIB)),
    ({"emulate_vram": True}, "--emulate-vram", "false", "true"),
    ({"host_memory_limit_bytes": 2 * GIB}, "--host-memory-limit", "null", str(2 * GIB)),
    ({"suite_overrides": {"limit": 5}}, "--suite-limit", "null", "5"),
    ({"suite_overrides": {"max_tokens": 64}}, "--suite-max-tokens", "null", "64"),
    ({"suite_overrides": {"tasksets": ("rg-math",)}}, "--suite-tasksets", "null", '["rg-math"]'),
    ({"suite_overrides": {"max_concurrent": 2}}, "--suite-concurrency", "null", "2"),
])
def test_a_setting_that_changes_what_was_measured_is_refused_on_resume(env, change, setting, stored, new):
    env.study = open_study(env.plan, env.space)
    env.add_trial(None, (100.0, 1000.0), role="baseline")  # something was measured under the stored settings
    changed = dataclasses.replace(env.plan, **change)
    assert changed.key == env.plan.key  # not the study's identity: checked one by one instead
    with pytest.raises(PlanError) as caught:
        open_study(changed, env.space)
    message = str(caught.value)
    assert message == (f"{setting}: study stages was measured with {stored}, this run gives {new}; resume with the "
                       "stored value, or start afresh with --study NEW")
    assert "\n" not in message


def test_another_probe_set_is_refused_on_resume(env):
    env.study = open_study(env.plan, env.space)
    env.add_trial(None, (100.0, 1000.0), role="baseline")
    changed = dataclasses.replace(env.plan, probe_config=ProbeSetConfig(long_context_tokens=(4000,)))
    with pytest.raises(PlanError, match=r"^the probe set: study stages was measured with \{"):
        open_study(changed, env.space)


def test_settings_that_steer_the_search_resume(env):
    study = open_study(env.plan, env.space)
    assert study.user_attrs["settings"]["--pin"] == {"cache_tokens": 32768}
    steered = dataclasses.replace(env.plan, trials=40, hours=2.0, seed=7, finalists=3, finalist_launches=3, port=0,
                                  heartbeat_s=5, grace_s=30, enqueued=({"max_chunk_size": 4096},))
    resumed = open_study(steered, env.space)
    assert resumed.user_attrs["settings"] == study.user_attrs["settings"]


def test_a_study_from_before_settings_were_stored_adopts_this_runs(env, caplog):
    env.study = open_study(env.plan, env.space)
    env.add_trial(None, (1.0, 1.0))  # a trial, so the study is not new
    env.study.set_user_attr("settings", None)  # as a study made before this check stored them
    resumed = open_study(dataclasses.replace(env.plan, vram_bytes=16 * GIB), env.space)
    assert "stored no settings" in caplog.text
    assert resumed.user_attrs["settings"]["--vram"] == 16 * GIB  # checked from now on


def test_a_study_that_measured_nothing_yet_takes_the_new_settings(env):
    """A baseline that could not fit ends the study with no completed trial: another --vram fixes it."""
    env.study = open_study(env.plan, env.space)
    env.add_trial(None, None, role="baseline", state=optuna.trial.TrialState.FAIL, outcome="infeasible")
    resumed = open_study(dataclasses.replace(env.plan, vram_bytes=48 * GIB), env.space)
    assert resumed.user_attrs["settings"]["--vram"] == 48 * GIB
