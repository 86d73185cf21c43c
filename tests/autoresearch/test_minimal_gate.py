"""The minimal champion is judged like a candidate before export may write it (autoresearch.champion.minimal_gate).

Real parts: Optuna, the results store, the gate (eval.gate_candidate), the baseline's stored evidence
(tests.autoresearch.stage_env) and export. Test doubles at the outside boundary only: the launcher
(tests.autoresearch.fakes.FakeLauncher) and what the server's logprobs give the fidelity probes (a
scripted measurement, saved to the real store as eval.fidelity.measure_fidelity saves one).
"""

from __future__ import annotations

import dataclasses

import pytest

import autoresearch.champion.minimal_gate as minimal_gate
from autoresearch.champion.change_costs import MINIMIZATION_ATTR
from autoresearch.champion.crowned import minimized_stamp
from autoresearch.champion.export import _exported_config
from autoresearch.champion.minimal_gate import gate_minimal
from autoresearch.champion.minimization import BaselineCheck, Cost, Minimization
from autoresearch.crown.finalists import load_champion
from eval.fidelity import load_fidelity_measurement
from eval.records import FidelityMetrics
from search_space import config_from_params
from serving.errors import ServerCrashed
from tests.autoresearch.fakes import FakeLauncher

from .stage_env import StageEnv

LOSSLESS = {"kl_mean": 1e-5, "kl_p99": 1e-4, "top1_agreement": 1.0}
BROKEN = {"kl_mean": 0.5, "kl_p99": 3.0, "top1_agreement": 0.6}


@pytest.fixture
def env(tmp_path, small_model, monkeypatch):
    env = StageEnv.make(tmp_path, small_model)
    env.baseline_done()
    return env


def _scripted_fidelity(env, monkeypatch, stats: dict) -> list[str]:
    """measure_fidelity's double: the scripted statistics, stored against the baseline's reference."""
    labels = []

    def measure(url, reference, *, store, role, label):
        labels.append(label)
        metrics = FidelityMetrics(n_probes=1, n_positions=1, kl_max=stats["kl_p99"], greedy_match_fraction=1.0,
                                  greedy_full_matches=1, ref_token_logprob_delta_mean=0.0, **stats)
        mid = store.save_measurement(reference_id=reference.reference_id, role=role, label=label, metrics=metrics,
                                     per_probe=[{"probe_id": "p0"}], elapsed_s=0.5, server={})
        return load_fidelity_measurement(store, mid)

    monkeypatch.setattr(minimal_gate, "measure_fidelity", measure)
    return labels


def _exported(env, capsys):
    """What export writes for the study's champion (the confirmed one: the first config given to _minimized)."""
    return _exported_config(env.study, load_champion(env.study), full=False)[0]


def _versus(speedup: float, verdict: str) -> BaselineCheck:
    """The minimal champion against the baseline, as minimize() measures it (its tests': test_minimize.py)."""
    return BaselineCheck(cost=Cost(request=(speedup, speedup - 0.02, speedup + 0.02), decode=(speedup,) * 3,
                                   prefill=(1.0, 1.0, 1.0), verdict=verdict, launches=2))


def _minimized(env, champion_changes: dict, minimal_changes: dict, versus: BaselineCheck | None = None) -> Minimization:
    """A minimization as minimize_champion stores it, of the champion as the finalists' stage stores it (trial 7,
    round 1); its launches are autoresearch.champion.minimize's tests'."""
    champion = config_from_params(env.space, env.params(champion_changes))
    minimal = config_from_params(env.space, env.params(minimal_changes))
    result = Minimization(changes=(), costs={}, carried={}, unremovable={}, attempts=(), kept=tuple(minimal_changes),
                          minimal=minimal, launches=4, bound=10, complete=True,
                          versus_baseline=versus or _versus(1.2, "faster"))
    env.study.set_user_attr("champion", {"trial": 7, "config": champion.to_dict(), "is_baseline": False, "round": 1,
                                         "decode_tok_per_s": 120.0, "prefill_tok_per_s": 1200.0, "speedup": 1.2})
    env.study.set_user_attr(MINIMIZATION_ATTR, result.to_dict() | {"minimized": minimized_stamp(7, champion, 1)})
    return result


def test_a_lossless_minimal_champion_passes_with_one_decision_row_and_export_writes_it(env, monkeypatch, capsys):
    launcher = FakeLauncher()
    monkeypatch.setattr("autoresearch.ground.servers.serve", launcher.serve)
    labels = _scripted_fidelity(env, monkeypatch, LOSSLESS)
    result = _minimized(env, {"max_chunk_size": 4096, "prefill_cooldown": 3}, {"max_chunk_size": 4096})

    verdict = gate_minimal(env.plan, env.study, env.db, env.store, None, result)

    assert verdict["passed"] and verdict["reason"] == "judged as a candidate (fidelity)"
    assert [c.digest for c in launcher.launches] == [result.minimal.digest]  # one fresh launch of it
    assert labels == [f"stages:minimal-{result.minimal.digest[:12]}"]
    (row,) = [d for d in env.store.decision_rows() if d["candidate_label"] == labels[0]]
    assert row["passed"] and row["id"] == verdict["decision_id"]
    assert env.study.user_attrs[MINIMIZATION_ATTR]["extra"]["gate"]["passed"] is True
    assert _exported(env, capsys).digest == result.minimal.digest

    # stored: a resumed loop asks again and gets the verdict without a launch
    assert gate_minimal(env.plan, env.study, env.db, env.store, None, Minimization.from_dict(
        env.study.user_attrs[MINIMIZATION_ATTR]))["passed"]
    assert len(launcher.launches) == 1


def test_a_minimal_champion_that_loses_fidelity_fails_and_export_keeps_the_confirmed_champion(env, monkeypatch,
                                                                                              tmp_path, capsys):
    monkeypatch.setattr("autoresearch.ground.servers.serve", FakeLauncher().serve)
    labels = _scripted_fidelity(env, monkeypatch, BROKEN)
    result = _minimized(env, {"max_chunk_size": 4096, "prefill_cooldown": 3}, {"prefill_cooldown": 3})

    verdict = gate_minimal(env.plan, env.study, env.db, env.store, None, result)

    assert not verdict["passed"] and "kl_mean" in verdict["reason"], verdict
    (row,) = [d for d in env.store.decision_rows() if d["candidate_label"] == labels[0]]
    assert not row["passed"]
    assert env.study.user_attrs[MINIMIZATION_ATTR]["extra"]["gate"]["passed"] is False
    assert _exported(env, capsys).digest == config_from_params(
        env.space, env.params({"max_chunk_size": 4096, "prefill_cooldown": 3})).digest
    assert "the minimal champion is not exported: it failed the gate: " in capsys.readouterr().err


def test_a_minimal_champion_not_shown_faster_than_the_baseline_is_not_gated_and_not_exported(env, monkeypatch,
                                                                                          capsys):
    """Before: nothing compared the minimal champion with the baseline; it was gated (an hour on a 27B) and, once
    passed, exported as the champion's speed-up."""
    launcher = FakeLauncher()
    monkeypatch.setattr("autoresearch.ground.servers.serve", launcher.serve)
    labels = _scripted_fidelity(env, monkeypatch, LOSSLESS)
    result = _minimized(env, {"max_chunk_size": 4096, "prefill_cooldown": 3}, {"prefill_cooldown": 3},
                        versus=_versus(1.01, "same"))

    verdict = gate_minimal(env.plan, env.study, env.db, env.store, None, result)

    assert launcher.launches == [] and labels == []  # not launched, not judged
    assert not verdict["passed"] and verdict["judged"] is False
    assert verdict["reason"].startswith("the minimal champion was not shown faster than the baseline (1.010x [0.990, "
                                        "1.030] the baseline on request time (not shown faster; ")
    assert env.study.user_attrs[MINIMIZATION_ATTR]["extra"]["gate"] == verdict
    assert _exported(env, capsys).digest == config_from_params(
        env.space, env.params({"max_chunk_size": 4096, "prefill_cooldown": 3})).digest  # the confirmed champion
    assert "the minimal champion is not exported: it was not shown faster than the baseline: 1.010x" in \
        capsys.readouterr().err


def test_a_minimal_champion_whose_launch_fails_did_not_pass(env, monkeypatch):
    result = _minimized(env, {"max_chunk_size": 4096, "prefill_cooldown": 3}, {"max_chunk_size": 4096})
    launcher = FakeLauncher(fails={result.minimal.digest: ServerCrashed("exited with -11",
                                                                        log_tail="Segmentation fault")})
    monkeypatch.setattr("autoresearch.ground.servers.serve", launcher.serve)
    labels = _scripted_fidelity(env, monkeypatch, LOSSLESS)

    verdict = gate_minimal(env.plan, env.study, env.db, env.store, None, result)

    assert not verdict["passed"] and verdict["reason"].startswith("it could not be judged: ServerCrashed: exited with -11")
    assert labels == []  # nothing was measured, and nothing claims it was
    assert env.study.user_attrs[MINIMIZATION_ATTR]["extra"]["gate"]["passed"] is False
    # before: no decision row at all; now its one row says it could not be judged, and why
    [row] = [d for d in env.store.decision_rows() if d["candidate_label"].endswith(f"minimal-{result.minimal.digest[:12]}")]
    assert row["id"] == verdict["decision_id"] and not row["passed"] and row["failed_stage"] == "fidelity"
    assert row["reasons"] == ["fidelity could not be judged: ServerCrashed: exited with -11"]


class _TierThatCannotLaunch:
    """The task tier's seam, whose baseline server for the lazy answers fails to launch."""

    def judge(self, study, *, trial, label, config, baseline, fidelity, server, release, name):
        release()
        raise ServerCrashed("the baseline's server for the answers exited with -9", log_tail="Killed")


def test_a_minimal_champion_whose_task_tier_cannot_launch_leaves_one_row_saying_why(env, monkeypatch):
    """Before: fidelity passed (its row not saved, as a tier followed), the tier failed to launch: no row at all."""
    monkeypatch.setattr("autoresearch.ground.servers.serve", FakeLauncher().serve)
    labels = _scripted_fidelity(env, monkeypatch, LOSSLESS)
    result = _minimized(env, {"max_chunk_size": 4096, "prefill_cooldown": 3}, {"max_chunk_size": 4096})

    verdict = gate_minimal(env.plan, env.study, env.db, env.store, _TierThatCannotLaunch(), result)

    [row] = [d for d in env.store.decision_rows() if d["candidate_label"] == labels[0]]
    assert not verdict["passed"] and verdict["decision_id"] == row["id"]
    assert not row["passed"] and row["failed_stage"] == "tasks" and row["evidence"]["fidelity"]["passed"]
    assert "tasks could not be judged: ServerCrashed: the baseline's server" in row["reasons"][0]


class _Tier:
    """The task tier's seam (autoresearch.checks.judging.TierRunner.judge), recording what it was asked to judge."""

    def __init__(self, env, passed: bool):
        self.env, self.passed, self.calls = env, passed, []

    def judge(self, study, *, trial, label, config, baseline, fidelity, server, release, name):
        from eval import gate_candidate

        self.calls.append({"trial": trial, "label": label, "digest": config.digest, "name": name})
        release()  # the tier stops the candidate's server before the baseline's starts
        record = gate_candidate(self.env.store, model_manifest_hash=self.env.plan.model.manifest_hash,
                                candidate_label=label, baseline_label=baseline.label,
                                policy=self.env.plan.gate_policy, floor=baseline.fidelity_floor,
                                candidate_fidelity=fidelity)
        if not self.passed:
            record = dataclasses.replace(record, decision=dataclasses.replace(
                record.decision, passed=False, reasons=("rg-math: lost 9 of 40 paired tasks",)))
        return record, None


@pytest.mark.parametrize("tasks_pass", [True, False])
def test_with_a_suite_the_task_tier_judges_it_under_its_own_name_after_fidelity(env, monkeypatch, tasks_pass):
    monkeypatch.setattr("autoresearch.ground.servers.serve", FakeLauncher().serve)
    _scripted_fidelity(env, monkeypatch, LOSSLESS)
    result = _minimized(env, {"max_chunk_size": 4096, "prefill_cooldown": 3}, {"max_chunk_size": 4096})
    tier = _Tier(env, passed=tasks_pass)

    verdict = gate_minimal(env.plan, env.study, env.db, env.store, tier, result)

    (call,) = tier.calls
    assert call["trial"] is None and call["name"] == f"minimal-{result.minimal.digest[:12]}"  # not a trial's answers
    assert call["digest"] == result.minimal.digest
    assert verdict["passed"] is tasks_pass
    # one decision row, the tier's: fidelity's pass was not saved, as a later tier ran
    assert [d["id"] for d in env.store.decision_rows() if d["candidate_label"] == call["label"]] == [
        verdict["decision_id"]]
    assert verdict["reason"] == ("judged as a candidate (fidelity and tasks)" if tasks_pass
                                 else "rg-math: lost 9 of 40 paired tasks")


def test_with_a_suite_a_fidelity_failure_is_the_last_tier_and_saves_the_one_row(env, monkeypatch):
    monkeypatch.setattr("autoresearch.ground.servers.serve", FakeLauncher().serve)
    labels = _scripted_fidelity(env, monkeypatch, BROKEN)
    result = _minimized(env, {"max_chunk_size": 4096, "prefill_cooldown": 3}, {"max_chunk_size": 4096})
    tier = _Tier(env, passed=True)

    verdict = gate_minimal(env.plan, env.study, env.db, env.store, tier, result)

    assert tier.calls == [] and not verdict["passed"]
    assert len([d for d in env.store.decision_rows() if d["candidate_label"] == labels[0]]) == 1


def test_the_tabbyapi_subset_export_writes_is_judged_like_a_candidate_and_its_verdict_stored(env, monkeypatch):
    """Before: the subset TabbyAPI runs (the settings it cannot express dropped) was measured for speed only."""
    from autoresearch.champion.minimal_gate import gate_tabbyapi_subset

    monkeypatch.setattr("autoresearch.ground.servers.serve", FakeLauncher().serve)
    labels = _scripted_fidelity(env, monkeypatch, BROKEN)  # the dropped setting was holding the model together
    result = _minimized(env, {"max_chunk_size": 4096, "prefill_cooldown": 3}, {"max_chunk_size": 4096})
    subset = config_from_params(env.space, env.params({"prefill_cooldown": 3}))
    stored = env.study.user_attrs[MINIMIZATION_ATTR]
    env.study.set_user_attr(MINIMIZATION_ATTR, {**stored, "extra": {"tabbyapi_subset": {
        "of": "minimal", "digest": subset.digest, "config": subset.to_dict(), "cost": None}}})
    result = Minimization.from_dict(env.study.user_attrs[MINIMIZATION_ATTR])

    verdict = gate_tabbyapi_subset(env.plan, env.study, env.db, env.store, None, result)

    assert labels == [f"stages:tabbyapi-{subset.digest[:12]}"] and not verdict["passed"]
    [row] = [d for d in env.store.decision_rows() if d["candidate_label"] == labels[0]]
    assert row["id"] == verdict["decision_id"] and row["failed_stage"] == "fidelity"
    assert env.study.user_attrs[MINIMIZATION_ATTR]["extra"]["tabbyapi_subset"]["gate"] == verdict
