"""`python -m autoresearch sweep`: the loop's baseline protocol, then each candidate in a fresh launch.

The end-to-end test runs the command the GPU fidelity record runs, on the tiny model with CPU-engine
configurations; the others check the protocol's order of launches and stages with named stand-ins
for eval's fidelity calls (no server).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from autoresearch import baseline
from autoresearch.baseline import run_baseline
from autoresearch.errors import BaselineUnmeasured
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
    """Record the protocol's launches, stages and eval calls; the eval calls are stand-ins."""
    log: list[str] = []
    monkeypatch.setattr(baseline, "capture_reference", lambda url, probes, **kw: log.append(f"capture@{url}") or "ref")
    monkeypatch.setattr(baseline, "measure_fidelity",
                        lambda url, ref, **kw: log.append(f"floor@{url}:{kw['label']}") or "floor")
    return log


def _serve(log):
    @contextlib.contextmanager
    def serve(launch):
        log.append(f"launch {launch}")
        yield SimpleNamespace(url=f"s{launch}")
    return serve


def test_without_speed_or_suite_a_stored_reference_skips_the_first_launch(calls):
    run = run_baseline(serve=_serve(calls), store=_Store("stored"), probe_set=SimpleNamespace(digest="d"),
                       model_manifest_hash="h", label="b", floor_label="b#2")
    assert calls == ["launch 1", "floor@s1:b#2"]
    assert (run.reference, run.fidelity_floor, run.suite, run.measured) == ("stored", "floor", None, None)


def test_the_baseline_is_measured_first_in_both_launches_then_reference_suite_and_floor(calls):
    stages: list[str] = []
    suite_ok = SimpleNamespace(tasksets=())
    run = run_baseline(serve=_serve(calls), store=_Store(), probe_set=SimpleNamespace(digest="d"),
                       model_manifest_hash="h", label="b", floor_label="b#2",
                       measure=lambda server, n: calls.append(f"bench@{server.url}") or n,
                       suite=lambda server: calls.append(f"suite@{server.url}") or suite_ok,
                       stage=stages.append)
    assert calls == ["launch 0", "bench@s0", "capture@s0", "suite@s0", "launch 1", "bench@s1", "floor@s1:b#2"]
    assert stages == ["bench", "reference", "tasks", "noise floor"]
    assert run.measured == (0, 1) and run.suite is suite_ok


def test_a_baseline_that_cannot_be_measured_says_which_launch_and_why(calls):
    from autoresearch.errors import Unmeasured

    def measure(server, n):
        def bench():
            raise Unmeasured("decode@1024: no valid run")
        return baseline.measured_or_stop(bench, launch=n, server_failure=lambda: None)

    with pytest.raises(BaselineUnmeasured, match=r"launch 0\): decode@1024") as caught:
        run_baseline(serve=_serve(calls), store=_Store(), probe_set=SimpleNamespace(digest="d"),
                     model_manifest_hash="h", label="b", floor_label="b#2", measure=measure)
    assert (caught.value.constraint, caught.value.outcome) == ("measured", "unmeasured")
    assert calls == ["launch 0"]


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
