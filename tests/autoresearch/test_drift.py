"""Drift: the baseline is re-measured during the search, and a candidate measured under drift is never pruned.

The stage machine (autoresearch.trial.runner.TrialRunner) runs real Optuna trials on a real SQLite study;
the outside boundary is `ScriptedMachine`, a test double at the serve boundary: its "launches" start
no process, and bench on them returns scripted speeds (each configuration's own speed times the
machine's, which halves mid-study, as a GPU that starts to throttle or a host another job loads).
The baseline itself is measured by a stand-in for the baseline protocol (tested in test_sweep.py):
two scripted launches stored as the baseline trial's bench rows, as the protocol stores them. The
fidelity and gate calls after the dominance check are stand-ins that pass.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest

from autoresearch.checks import readings as drift_readings
from autoresearch.checks.drift import DriftWatch, remeasure_due
from autoresearch.checks.readings import Limits, Reading, conditions, read_drift, read_readings
from autoresearch.ground.db import ResultsDB
from autoresearch.ground.model_source import ResolvedModel
from autoresearch.ground.plan import DriftPolicy, RunPlan, default_bench_plan, default_probe_config
from autoresearch.ground.study import CONSTRAINTS, open_study
from autoresearch.measures.baseline import save_baseline
from autoresearch.night.progress import Progress
from autoresearch.report.results_md import render_section
from autoresearch.trial import baseline_protocol
from autoresearch.trial import runner as trial_module
from autoresearch.trial.runner import TrialRunner
from bench import NoiseFloor, noise_floor
from eval import EvalStore
from openai_client import Endpoint
from search_space import SpaceContext, build_space, read_model_info, sample_config
from tests.gpu.fakes import FakeGpu, FakePynvml, install

from .conftest import FAST, run_loop
from .test_objectives import _result

ROOT = Path(__file__).resolve().parents[2]

BASE = (100.0, 1000.0)  # the baseline's decode and prefill tok/s on a quiet machine
# each candidate's own speed relative to the baseline, by its prefill chunk size
SPEED = {0: 1.0, 64: 1.2, 128: 0.9, 256: 1.1, 512: 0.9}


class ScriptedMachine:
    """Test double at the serve boundary: no process is started; bench on a launch reads scripted speeds.

    A launch's speed is its configuration's (SPEED, by prefill chunk size) times the machine's factor,
    1.0 until launch number `halve_from` (1-based) and 0.5 from then on."""

    def __init__(self, halve_from: int) -> None:
        self.halve_from = halve_from
        self.launches: list[tuple[str, float]] = []  # (log file name, machine factor)
        self._servers: dict[str, SimpleNamespace] = {}

    @contextlib.contextmanager
    def serve(self, *, config, log_path, **_):
        factor = 0.5 if len(self.launches) + 1 >= self.halve_from else 1.0
        self.launches.append((log_path.name, factor))
        server = SimpleNamespace(url=f"http://scripted.invalid/{len(self.launches)}", pid=None, config=config,
                                 factor=factor, check=lambda: None)
        self._servers[server.url] = server
        yield server

    def run_bench(self, plan, endpoint: Endpoint, workload=None):
        server = self._servers[endpoint.url]
        own = SPEED[server.config.args.prefill_chunk_size] * server.factor
        decode, prefill = BASE[0] * own, BASE[1] * own
        return _result({8192: [prefill] * 3}, {(1024, "math"): [decode] * 3})


def _install(m: ScriptedMachine, monkeypatch) -> ScriptedMachine:
    """The scripted machine at every launch the trial runner and the drift check make."""
    monkeypatch.setattr("autoresearch.ground.servers.serve", m.serve)  # every ServerSpec.launch
    monkeypatch.setattr("autoresearch.ground.plan.run_bench", m.run_bench)  # every RunPlan.fresh_bench
    monkeypatch.setattr(trial_module, "server_info", lambda url: None)  # the double has no /v1/server_info
    # the gate after the dominance check: stand-ins that pass (the fidelity gate has its own tests)
    for module in (trial_module, baseline_protocol):
        monkeypatch.setattr(module, "measure_fidelity", lambda *a, **kw: SimpleNamespace(measurement_id=1, metrics={}))
    monkeypatch.setattr(trial_module, "gate_candidate", lambda *a, **kw: SimpleNamespace(
        decision=SimpleNamespace(passed=True, failed_stage=None, reasons=[]), decision_id=1))
    return m


@pytest.fixture
def machine(monkeypatch):
    return _install(ScriptedMachine(halve_from=5), monkeypatch)  # launches 1-2: the baseline, 3-4: trials 1-2,
    # 5: the first drift check


@pytest.fixture
def plan(tmp_path, tiny_model_dir) -> RunPlan:
    model = ResolvedModel(path=tiny_model_dir, name="tiny", manifest_hash="0" * 64,
                          manifest_path=tmp_path / "manifest.json", source="tiny")
    return RunPlan(model=model, engine="transformers", suite="none", study_name="drift",
                   storage_url=f"sqlite:///{tmp_path / 'results.db'}", workdir=tmp_path / "runs",
                   results_md=tmp_path / "RESULTS.md", trials=20, bench_plan=default_bench_plan("transformers"),
                   probe_config=default_probe_config("transformers"), port=0,
                   levers=False, drift=DriftPolicy(every_trials=2, every_minutes=None))


def _baseline_measured(study, plan, space, db, machine):
    """Stand-in for the baseline protocol: two fresh launches, stored as the protocol stores them."""

    results = []

    def protocol(trial):
        config = sample_config(trial, space)
        for key, value in {"role": "baseline", "config": config.to_dict(), "config_digest": config.digest,
                           "outcome": "baseline"}.items():
            trial.set_user_attr(key, value)
        for launch in (0, 1):
            with machine.serve(config=config, log_path=plan.study_dir / f"baseline-{launch}.log") as server:
                results.append(machine.run_bench(plan.bench_plan, Endpoint(url=server.url)))
            db.add_measurement(study=plan.study_name, trial=trial.number, kind="bench", config_digest=config.digest,
                               payload=results[-1].to_dict(), launch=launch)
        evidence = SimpleNamespace(label="b", reference=SimpleNamespace(model_manifest_hash="0", probe_set_digest="d"),
                                   fidelity_floor=SimpleNamespace(measurement_id=1), suite=None,
                                   speed_floor=noise_floor(results[0].samples(), results[1].samples()),
                                   trial_number=trial.number, energy_floor=None)
        save_baseline(trial.study, evidence)
        for key in CONSTRAINTS:
            trial.set_constraint(key, -1.0)
        return BASE

    study.optimize(protocol, n_trials=1)
    return SimpleNamespace(label="b", reference=None, fidelity_floor=None, suite=None, bench=results[0],
                           speed_floor=NoiseFloor(rel_diff=()), trial_number=0, energy_floor=None)


def _study_after_baseline(plan, machine, monkeypatch):
    """The study with its baseline measured on the scripted machine, and a trial runner that reads it."""
    space = build_space(SpaceContext(engine="transformers", model=read_model_info(plan.model.path)))
    study = open_study(plan, space)
    db = ResultsDB(plan.storage_url)
    evidence = _baseline_measured(study, plan, space, db, machine)
    monkeypatch.setattr(baseline_protocol, "wait_for_baseline", lambda trial, **kw: evidence)
    runner = TrialRunner(plan, space, db, EvalStore(plan.storage_url),
                         Progress(study=plan.study_name, trials=20, hours=None, live=False))
    return study, db, runner


def test_the_baseline_halving_mid_study_is_reported_and_prunes_no_candidate(plan, machine, monkeypatch, caplog):
    study, db, runner = _study_after_baseline(plan, machine, monkeypatch)
    base = study.trials[0].params
    for chunk in (64, 128, 256, 512):
        study.enqueue_trial({**base, "prefill_chunk_size": chunk})
    with caplog.at_level(logging.WARNING, logger="autoresearch.checks.drift"):
        study.optimize(runner, n_trials=4)

    trials = {t.params["prefill_chunk_size"]: t for t in study.get_trials()[1:]}
    # Quiet machine: trial 2 (0.9x) is clearly slower than trial 1 (1.2x) and pruned, as without drift.
    assert trials[128].state == optuna.trial.TrialState.PRUNED
    assert trials[128].user_attrs["drift"]["drifted"] is False
    # Two trials later the baseline is re-measured in a fresh launch, and the machine runs at half speed.
    assert [name.split("-")[0] for name, _ in machine.launches] == ["baseline", "baseline", "trial", "trial", "drift",
                                                                     "trial", "drift", "trial"]
    # Trial 3 (1.1x: 55 tok/s measured on the slowed machine) reads slower than trial 1 (120) on both
    # objectives, but its nearest baseline reading drifted: it is not pruned, and its record says why.
    held = trials[256]
    assert held.state == optuna.trial.TrialState.COMPLETE and held.user_attrs["outcome"] == "passed"
    assert held.user_attrs["drift"]["drifted"] is True and held.user_attrs["drift"]["held_from_pruning_by"] == 1
    assert held.user_attrs["drift"]["decode_vs_first"] == pytest.approx(0.5)
    assert any(r.startswith("not pruned (measured under drift: the baseline's nearest reading (drift check before "
                            "trial 3) was at 0.50x decode, 0.50x prefill") for r in held.user_attrs["reasons"])
    # Trial 4 (0.9x) too: the drift was checked once more before it (a lasting change, not a transient).
    assert trials[512].state == optuna.trial.TrialState.COMPLETE and trials[512].user_attrs["drift"]["hold"]
    # No trial was pruned on a measurement whose nearest baseline reading had drifted.
    for t in study.get_trials(states=(optuna.trial.TrialState.PRUNED,)):
        assert not t.user_attrs["drift"]["hold"], t.number
    assert "baseline drift: drift check before trial 3 reads 0.50x decode, 0.50x prefill" in caplog.text

    report = read_drift(plan, study, db)
    assert [(r.source, round(r.decode_ratio, 6), r.drifted) for r in report.rows] == [
        ("baseline trial 0, launch 0", 1.0, False), ("baseline trial 0, launch 1", 1.0, False),
        ("drift check before trial 3", 0.5, True), ("drift check before trial 4", 0.5, True)]
    assert report.checks == 2 and [n for n, _ in report.held] == [3, 4]
    text = render_section("drift", report)
    assert "| drift check before trial 3 **drift** |" in text and "| 50.00 | 500.0 | 0.500x | 0.500x |" in text
    assert "- trial 3: measured under drift" in text


def test_with_the_check_off_the_study_prunes_on_raw_speeds_and_launches_no_baseline(plan, machine, monkeypatch):
    plan = dataclasses.replace(plan, drift=DriftPolicy(every_trials=None, every_minutes=None))
    study, db, runner = _study_after_baseline(plan, machine, monkeypatch)
    for chunk in (64, 128, 256):
        study.enqueue_trial({**study.trials[0].params, "prefill_chunk_size": chunk})
    study.optimize(runner, n_trials=3)
    assert not any(name.startswith("drift") for name, _ in machine.launches)
    # the failure the check exists for: the 1.1x configuration, measured on the slowed machine, is pruned
    assert study.trials[-1].state == optuna.trial.TrialState.PRUNED


# ---- the rules, on their own ----

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _reading(minutes: float, decode: float = 100.0, prefill: float = 1000.0, error: str | None = None) -> Reading:
    return Reading(source=f"r{minutes}", at=T0 + dt.timedelta(minutes=minutes),
                   decode=None if error else decode, prefill=None if error else prefill, error=error)


def test_the_limits_are_twice_the_baseline_floor_of_each_objective_and_at_least_five_percent():
    floor = NoiseFloor(rel_diff=(("decode_tok_per_s_client@1024/math", 0.04), ("prefill_tok_per_s_server@8192", 0.01)))
    assert Limits.from_floor(floor) == Limits(decode=0.08, prefill=0.05, floor_decode=0.04, floor_prefill=0.01)
    assert Limits.from_floor(None) == Limits(decode=0.05, prefill=0.05)


def test_a_floor_wider_than_a_steady_machine_gives_is_said_out_loud():
    """Before: the baseline's launches at 54.8 and 4.6 tok/s (another job started between them) made a 183%
    drift threshold, and nothing said the study's measurements were noise."""
    steady = NoiseFloor(rel_diff=(("decode_tok_per_s_client@1024/math", 0.04), ("prefill_tok_per_s_server@8192", 0.2)))
    assert Limits.from_floor(steady).unsteady is None
    wide = Limits.from_floor(NoiseFloor(rel_diff=(("decode_tok_per_s_client@128/math", 0.917),
                                                  ("prefill_tok_per_s_server@256", 0.1))))
    assert wide.decode == pytest.approx(1.834) and wide.floor_decode == pytest.approx(0.917)
    assert wide.unsteady.startswith("the baseline's own two launches differed by 92% in decode (more than 25%): the "
                                    "machine was not steady while they ran")


def test_an_unsteady_baseline_is_logged_once_and_prunes_no_candidate(plan, monkeypatch, caplog):
    machine = _install(ScriptedMachine(halve_from=2), monkeypatch)  # the baseline's second launch at half speed
    study, db, runner = _study_after_baseline(plan, machine, monkeypatch)
    for chunk in (64, 128):
        study.enqueue_trial({**study.trials[0].params, "prefill_chunk_size": chunk})
    with caplog.at_level(logging.WARNING, logger="autoresearch.checks.drift"):
        study.optimize(runner, n_trials=2)
    warnings = [r.getMessage() for r in caplog.records if r.getMessage().startswith("measurements unsteady: ")]
    assert len(warnings) == 1 and "differed by 50% in decode and 50% in prefill" in warnings[0], warnings
    # both candidates read at half the baseline's first speed (the machine's, not theirs): neither is pruned
    for t in study.get_trials()[1:]:
        assert t.state == optuna.trial.TrialState.COMPLETE and t.user_attrs["drift"]["hold"], t.number
        assert any(r.startswith("not pruned (measurements unsteady: the baseline's own two launches differ by more "
                                "than 25%") for r in t.user_attrs["reasons"]), t.user_attrs["reasons"]
    assert read_drift(plan, study, db).limits.unsteady  # what RESULTS.md says at the top of its champion


def test_a_reading_is_due_after_k_trials_t_minutes_a_failed_check_or_a_new_drift():
    policy, limits = DriftPolicy(every_trials=3, every_minutes=30), Limits(0.05, 0.05)

    def due(readings, minutes, finished=0):
        return remeasure_due(readings, policy=policy, limits=limits, now=T0 + dt.timedelta(minutes=minutes),
                             finished_since_latest=finished)

    quiet = [_reading(0), _reading(1)]
    assert due(quiet, 10, finished=2) is None
    assert due(quiet, 10, finished=3) == "3 trials since the latest reading"
    assert due(quiet, 31) == "the latest reading is 30 minutes old"
    assert due([*quiet, _reading(5, error="LaunchError: boom")], 6).startswith("the latest drift check failed")
    assert due([*quiet, _reading(5, decode=80)], 6).startswith("the latest reading drifted")
    assert due([*quiet, _reading(5, decode=80), _reading(6, decode=80)], 7) is None  # re-checked once: lasting
    assert remeasure_due(quiet, policy=DriftPolicy(None, None), limits=limits, now=T0 + dt.timedelta(days=1),
                         finished_since_latest=99) is None


def test_a_check_with_no_rule_left_is_refused_as_a_usage_error():
    from autoresearch.ground.errors import PlanError

    with pytest.raises(PlanError, match="--drift-every-trials must be >= 1"):
        DriftPolicy(every_trials=0)


def test_conditions_name_the_hosts_load_and_the_gpus_clocks_throttling_and_other_processes(monkeypatch):
    install(monkeypatch, FakePynvml([FakeGpu(pids=(4242, 999), clocks_event_reasons=0x20)]))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    c = conditions(server_pid=999)
    assert len(c["load_avg"]) == 3 and c["cpu_count"] >= 1
    assert c["gpu"]["throttle_reasons"] == ["sw_thermal_slowdown"] and c["gpu"]["other_pids"] == [4242]
    assert c["gpu"]["sm_clock_mhz"] == 1980
    assert drift_readings.conditions_text(c).endswith("1980/1980 MHz, 45 C, sw_thermal_slowdown; 1 other GPU process(es)")


def test_without_a_gpu_conditions_hold_the_host_only(monkeypatch):
    install(monkeypatch, FakePynvml([], driver=False))
    assert "gpu" not in conditions()


def test_finalist_round_readings_that_drifted_are_flagged(tmp_path):
    readings = [_reading(0), Reading(source="finalists round 2, launch 0", at=T0, decode=30.0, prefill=1000.0),
                Reading(source="finalists round 2, launch 1", at=T0, decode=99.0, prefill=1000.0)]
    (warning,) = drift_readings.round_drift(readings, Limits(0.05, 0.05), 2)
    assert warning.startswith("finalists round 2, launch 0: the baseline read 0.30x decode, 1.00x prefill")
    assert drift_readings.round_drift(readings, Limits(0.05, 0.05), 1) == []


def test_readings_come_back_from_the_store_in_time_order(plan, machine, tmp_path):
    space = build_space(SpaceContext(engine="transformers", model=read_model_info(plan.model.path)))
    study = open_study(plan, space)
    db = ResultsDB(plan.storage_url)
    _baseline_measured(study, plan, space, db, machine)
    db.add_measurement(study=plan.study_name, trial=None, kind=drift_readings.KIND, config_digest="x",
                       payload={"before_trial": 5, "error": "LaunchError: boom"})
    readings = read_readings(study, db, plan.study_name)
    assert [r.source for r in readings] == ["baseline trial 0, launch 0", "baseline trial 0, launch 1",
                                            "drift check before trial 5"]
    assert readings[0].decode == pytest.approx(100.0) and not readings[2].measured
    assert isinstance(DriftWatch(plan, db, space).limits(study), Limits)


@pytest.mark.long
@pytest.mark.slow
@pytest.mark.timeout(1800)  # the shared embedded study first, then two trials and two baseline launches on 2 cores
def test_a_real_cpu_study_re_measures_its_baseline_and_reports_the_readings(tmp_path, embedded_study):
    shutil.copy(embedded_study.cwd / "results.db", tmp_path / "results.db")
    # two more trials, the baseline re-measured before each (a fresh launch of the real CPU engine)
    result = run_loop(tmp_path, embedded_study.env, "--trials", "5", "--drift-every-trials", "1", *FAST)
    assert result.returncode == 0, result.stdout + result.stderr[-5000:]
    storage = f"sqlite:///{tmp_path / 'results.db'}"
    (name,) = optuna.get_all_study_names(storage)
    study, db = optuna.load_study(study_name=name, storage=storage), ResultsDB(storage)
    checks = db.measurements(study=name, kind=drift_readings.KIND)
    assert len(checks) >= 2 and all(c["payload"]["decode"] > 0 and c["payload"]["elapsed_s"] > 0 for c in checks)
    assert all("load_avg" in c["payload"]["conditions"] for c in checks)
    assert len(list((tmp_path / "runs" / name / "logs").glob("drift-before-*.log"))) == len(checks)
    new = [t for t in study.get_trials() if t.number >= 3 and t.user_attrs.get("role") == "candidate"
           and "drift" in t.user_attrs]
    assert new and all(t.user_attrs["drift"]["reading"].startswith("drift check before trial") for t in new)
    assert db.measurements(study=name, kind="conditions")  # every bench's conditions are stored beside it
    text = (tmp_path / "RESULTS.md").read_text()
    section = text.split("## Baseline drift")[1].split("\n## ")[0]
    assert f"Drift checks so far: {len(checks)} launches of the baseline" in section
    assert "| baseline trial 0, launch 0 |" in section and "| 1.000x | 1.000x | load " in section
    assert section.count("| drift check before trial ") == len(checks)
    cost = subprocess.run([sys.executable, str(ROOT / ".ci/gpu/drift_cost.py"), storage], capture_output=True,
                          text=True, env=embedded_study.env, check=True)
    summary = json.loads(cost.stdout)
    assert summary["drift_checks"] == len(checks) and 0 < summary["drift_share_of_search_time"] < 1
