"""`python -m autoresearch sweep`: the loop's baseline protocol, then each candidate in a fresh launch.

The end-to-end test runs the command the GPU fidelity record runs, on the tiny model with CPU-engine
configurations; the others check the order of its launches with named stand-ins for the launcher and
eval's fidelity calls (no server). The loop's own baseline, with its speed and task stages, is checked
in tests/autoresearch/test_baseline_failures.py.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from autoresearch.trial import sweep
from autoresearch.trial.sweep import run_sweep
from eval.decision import FidelityPolicy
from eval.errors import MissingReference
from eval.store import EvalStore

FP32 = {"engine": "transformers", "args": {"threads": 1}}
BF16 = {"engine": "transformers", "args": {"threads": 1, "dtype": "bfloat16"}}
ROOT = Path(__file__).resolve().parents[2]


class _Store:
    """Stand-in for EvalStore's reference lookup: holds one reference or none."""

    def __init__(self, reference=None):
        self.reference = reference

    def load_reference(self, model_manifest_hash, digest):
        if self.reference is None:
            raise MissingReference("none stored")
        return self.reference


@pytest.fixture
def calls(monkeypatch):
    """Record the sweep's launches (by log name) and eval calls; both are stand-ins."""
    log: list[str] = []

    @contextlib.contextmanager
    def serve(*, log_path, **_):
        log.append(f"launch {log_path.stem}")
        yield SimpleNamespace(url=log_path.stem)

    monkeypatch.setattr("autoresearch.ground.servers.serve", serve)
    monkeypatch.setattr(sweep, "capture_reference", lambda url, probes, **kw: log.append(f"capture@{url}") or "ref")
    monkeypatch.setattr(sweep, "measure_fidelity",
                        lambda url, ref, **kw: log.append(f"floor@{url}:{kw['label']}") or "floor")
    return log


def _baseline_only(tmp_path: Path, store: _Store):
    (tmp_path / "fp32.json").write_text(json.dumps(FP32))
    return run_sweep(model_dir=tmp_path, baseline_config_path=tmp_path / "fp32.json", candidates=[],
                     probe_set=SimpleNamespace(digest="d"), store=store, model_manifest_hash="h",
                     log_dir=tmp_path / "logs", policy=FidelityPolicy())


def test_a_stored_reference_skips_the_first_launch(calls, tmp_path):
    reference, floor, outcomes = _baseline_only(tmp_path, _Store("stored"))
    assert calls == ["launch baseline-floor", "floor@baseline-floor:baseline:fp32.json"]
    assert (reference, floor, outcomes) == ("stored", "floor", [])


def test_the_reference_is_captured_on_launch_0_and_the_floor_measured_on_a_fresh_launch_1(calls, tmp_path):
    reference, floor, _ = _baseline_only(tmp_path, _Store())
    assert calls == ["launch baseline-reference", "capture@baseline-reference",
                     "launch baseline-floor", "floor@baseline-floor:baseline:fp32.json"]
    assert (reference, floor) == ("ref", "floor")


@pytest.mark.slow
def test_the_sweep_command_launches_baseline_twice_and_each_candidate(tiny_model_dir, tmp_path):
    # The command the GPU record runs, here with CPU-engine configurations.
    (tmp_path / "fp32.json").write_text(json.dumps(FP32))
    (tmp_path / "bf16.json").write_text(json.dumps(BF16))
    db = f"sqlite:///{tmp_path / 'sweep.db'}"
    result = subprocess.run(
        [sys.executable, "-m", "autoresearch", "sweep", "--model", str(tiny_model_dir),
         "--baseline", str(tmp_path / "fp32.json"),
         "--candidate", f"fp32={tmp_path / 'fp32.json'}", "--candidate", f"bf16={tmp_path / 'bf16.json'}",
         "--db", db, "--log-dir", str(tmp_path / "logs"),
         "--continuation-tokens", "6", "--long-context-tokens", "150", "--long-continuation-tokens", "3",
         "--startup-timeout-s", "180"],
        capture_output=True, text=True, cwd=ROOT, timeout=540,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "fp32.gate: pass" in result.stdout and "bf16.gate: fail" in result.stdout
    assert "noise_floor.kl_mean: 0\n" in result.stdout
    assert "long_context-150.prompt_tokens:" in result.stdout
    assert sorted(p.name for p in (tmp_path / "logs").glob("*.log")) == [
        "baseline-floor.log",
        "baseline-reference.log",
        "candidate-bf16.log",
        "candidate-fp32.log",
    ]
    assert not list((tmp_path / "logs" / "servers").glob("*.pid"))  # every server stopped
    store = EvalStore(db)
    assert [(r["candidate_label"], r["passed"]) for r in store.decision_rows()] == [
        ("fp32", True),
        ("bf16", False),
    ]
    store.close()
