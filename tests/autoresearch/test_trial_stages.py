"""The trial runner's stages, one decision at a time: real Optuna, real results database, the memory
model of a headers-only checkpoint; the launcher and bench are the test doubles of `fakes`."""

from __future__ import annotations

import optuna
import pytest

from autoresearch.ground.outcome import TrialOutcome
from autoresearch.ground.study import CONSTRAINTS, feasible
from autoresearch.measures.baseline import load_baseline
from autoresearch.measures.objectives import NOT_MEASURED
from bench.metrics import Metric
from serving.errors import OutOfMemoryAtLoad, ServerCrashed

from .fakes import FakeLauncher
from .stage_env import GIB, StageEnv, constraints

FAST_CHUNK = {"max_chunk_size": 4096}


@pytest.fixture
def env(tmp_path, small_model) -> StageEnv:
    return StageEnv.make(tmp_path, small_model)


def _every_client_metric(env: StageEnv, rel: float) -> dict[str, float]:
    """A speed floor of `rel` on every client-timed metric bench measures under this plan."""
    plan = env.plan.bench_plan
    return {str(Metric.decode("decode_tok_per_s_client", c, k)): rel
            for c in plan.decode_context_tokens for k in plan.decode_kinds}


def test_a_measured_candidate_goes_on_to_fidelity_with_its_speeds(env, monkeypatch):
    launcher = FakeLauncher(speeds={"*": (120.0, 1100.0)}).install(monkeypatch)
    env.baseline_done()
    trial = env.run(FAST_CHUNK)
    assert launcher.launched(env.digest(FAST_CHUNK)) == 1
    # the fake server answers nothing: fidelity cannot be measured, and the trial says so
    assert TrialOutcome.of(trial) is TrialOutcome.FIDELITY_ERROR and trial.state == optuna.trial.TrialState.COMPLETE
    # rejected: its speeds in user attrs, no values (optuna-dashboard ranks COMPLETE values, constraints ignored)
    assert trial.values == list(NOT_MEASURED)
    assert (trial.user_attrs["decode_tok_per_s"], trial.user_attrs["prefill_tok_per_s"]) == pytest.approx((120.0, 1100.0))
    assert trial.constraints == {"fits": -1.0, "launch_ok": -1.0, "measured": -1.0, "fidelity": 1.0}


def test_a_candidate_within_the_speed_noise_floor_of_a_front_member_is_not_stopped_early(env, monkeypatch):
    """10% slower than a front member on both objectives: dominated under the plan's 5% margin, but not
    when fresh launches of the baseline differed by 10% (the margin is then 2 x 10%)."""
    FakeLauncher(speeds={"*": (90.0, 900.0)}).install(monkeypatch)
    env.baseline_done(values=(50.0, 500.0), floor=_every_client_metric(env, 0.10))
    front = env.add_trial({"max_chunk_size": 1024}, (100.0, 1000.0))
    trial = env.run(FAST_CHUNK)
    assert TrialOutcome.of(trial) is TrialOutcome.FIDELITY_ERROR, trial.user_attrs["reasons"]
    assert trial.user_attrs["stage"] == "fidelity" and front != trial.number


def test_a_clearly_slower_candidate_is_pruned_after_its_speed_is_stored(tmp_path, small_model, monkeypatch):
    env = StageEnv.make(tmp_path, small_model)
    FakeLauncher(speeds={"*": (90.0, 900.0)}).install(monkeypatch)
    env.baseline_done(values=(50.0, 500.0), floor=_every_client_metric(env, 0.01))  # a quiet GPU: the 5% margin
    front = env.add_trial({"max_chunk_size": 1024}, (100.0, 1000.0))
    trial = env.run(FAST_CHUNK)
    assert trial.state == optuna.trial.TrialState.PRUNED and TrialOutcome.of(trial) is TrialOutcome.DOMINATED
    assert trial.user_attrs["reasons"] == [f"clearly slower than trial {front} on both objectives"]
    assert trial.user_attrs["decode_tok_per_s"] == pytest.approx(90.0)


def test_a_configuration_that_cannot_fit_is_never_launched(tmp_path, small_model, monkeypatch):
    env = StageEnv.make(tmp_path, small_model, vram_bytes=GIB)
    launcher = FakeLauncher().install(monkeypatch)
    env.baseline_done()
    trial = env.run(FAST_CHUNK)
    assert TrialOutcome.of(trial) is TrialOutcome.INFEASIBLE and trial.values == list(NOT_MEASURED)
    assert "exceeds the usable" in trial.user_attrs["reasons"][0] and launcher.launches == []
    assert trial.constraints.keys() == {"fits"} and trial.constraints["fits"] > 0  # only what was measured


def test_the_calibrated_memory_model_refuses_what_the_kv_cache_s_growth_does_not_fit(tmp_path, monkeypatch):
    """Issue 47's observations, shifted to this configuration's prediction P (P - 6 -> P - 6.5, P - 5 -> P - 6.1,
    P - 3 -> P - 5.3 GiB: 20 -> 19.5, 21 -> 19.9, 23 -> 20.7 with P = 26) and --vram P - 1 GiB (25GiB). Before:
    calibrated to P - 1.7 GiB, under the usable P - 1.5, it was launched."""
    from autoresearch.ground.model_source import ResolvedModel
    from search_space import MemoryModel, config_from_params, read_model_info
    from serving.synthetic.exl3 import QWEN38_27B, write_exl3_checkpoint

    path = write_exl3_checkpoint(tmp_path / "q27", QWEN38_27B, sparse=True)  # the 27B's shapes, headers only
    model = ResolvedModel(path=path, name="q27-sparse", manifest_hash="7" * 64, manifest_path=path / "manifest.json",
                          source=str(path))
    (tmp_path / "probe").mkdir()
    probe = StageEnv.make(tmp_path / "probe", model)  # for this configuration's prediction
    predicted = MemoryModel(read_model_info(model.path)).estimate(
        config_from_params(probe.space, probe.params(FAST_CHUNK))).peak_bytes
    env = StageEnv.make(tmp_path, model, vram_bytes=predicted - GIB)
    for below, measured_below in ((6, 6.5), (5, 6.1), (3, 5.3)):
        env.db.add_measurement(study="stages", trial=0, kind="memory", config_digest="earlier", payload={
            "predicted_peak_bytes": predicted - below * GIB, "measured_peak_bytes": int(predicted - measured_below * GIB)})
    launcher = FakeLauncher().install(monkeypatch)
    env.baseline_done()
    trial = env.run(FAST_CHUNK)
    assert TrialOutcome.of(trial) is TrialOutcome.INFEASIBLE and launcher.launches == []
    assert trial.user_attrs["predicted_peak_calibrated_bytes"] >= predicted - GIB // 2  # the model's growth, at least
    assert "exceeds the usable" in trial.user_attrs["reasons"][0]


def test_a_launch_failure_is_a_completed_trial_with_its_reason(env, monkeypatch):
    oom = OutOfMemoryAtLoad("CUDA out of memory while loading", log_tail="torch.OutOfMemoryError: ...")
    FakeLauncher(fails={env.digest(FAST_CHUNK): oom}).install(monkeypatch)
    env.baseline_done()
    trial = env.run(FAST_CHUNK)
    assert trial.state == optuna.trial.TrialState.COMPLETE and trial.values == list(NOT_MEASURED)
    assert TrialOutcome.of(trial) is TrialOutcome.OOM_AT_LOAD and trial.user_attrs["failure"] == "oom_at_load"
    assert constraints(trial)["launch_ok"] > 0 and "CUDA out of memory" in trial.user_attrs["reasons"][0]
    [row] = env.db.measurements(study="stages", kind="launch", trial=trial.number)
    assert row["payload"]["reason"] == "oom_at_load"


def test_an_unmeasured_point_or_a_dead_server_gives_no_speed(env, monkeypatch):
    crash = ServerCrashed("exited with -11", log_tail="Segmentation fault")
    other = {"max_chunk_size": 1024}
    FakeLauncher(speeds={"*": None}, dies={env.digest(other): crash}).install(monkeypatch)
    env.baseline_done()
    short = env.run(FAST_CHUNK)
    assert TrialOutcome.of(short) is TrialOutcome.UNMEASURED and short.values == list(NOT_MEASURED)
    assert short.user_attrs["reasons"][0].startswith("unmeasured: decode_tok_per_s_client@1024/math: 0 valid of 3")
    dead = env.run(other)
    assert TrialOutcome.of(dead) is TrialOutcome.CRASHED and constraints(dead)["launch_ok"] > 0


def test_a_trial_missing_a_constraint_is_not_feasible():
    """Only what was measured is recorded (a trial the fidelity gate stopped has no `tasks`): one unset
    never counts as satisfied."""
    partial = optuna.trial.create_trial(values=[1.0, 1.0], constraints=dict.fromkeys(CONSTRAINTS[:-1], -1.0))
    assert not feasible(partial)
    assert feasible(optuna.trial.create_trial(values=[1.0, 1.0], constraints=dict.fromkeys(CONSTRAINTS, -1.0)))


def test_the_baseline_evidence_loads_the_noise_floor_as_it_was_measured(env):
    env.baseline_done()
    evidence = load_baseline(env.study, env.store, env.db, "stages")
    assert evidence.fidelity_floor.elapsed_s == 1.5  # stored with it, not a made-up 0.0
    assert evidence.fidelity_floor.per_probe == ({"probe_id": "p0"},)
