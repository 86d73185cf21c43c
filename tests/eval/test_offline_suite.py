"""The offline suite end to end: real verifiers 0.4.0 runs of the package-data tasksets against the tiny server."""

from __future__ import annotations

import shutil
import subprocess
import sys

import httpx
import pytest

from eval.errors import EndpointError
from eval.paths import EvalPaths
from eval.prime.locks import load_locks
from eval.run_config import build_launch, harness_path
from eval.runner import run_suite, run_taskset
from eval.store import EvalStore
from eval.suites import SuiteOverrides, apply_overrides, get_suite
from openai_client import Endpoint

pytestmark = pytest.mark.slow

LIMIT, MAX_TOKENS = 2, 16  # the tiny model is random: rewards are ~0; the pipeline is what is measured


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("offline-suite")
    return {"paths": EvalPaths(root / "cache"), "db": f"sqlite:///{root / 'results.db'}"}


@pytest.fixture(scope="module")
def baseline(tiny_server, workspace):
    model = httpx.get(tiny_server.url + "/v1/models").json()["data"][0]["id"]
    overrides = SuiteOverrides(limit=LIMIT, max_tokens=MAX_TOKENS)
    store = EvalStore(workspace["db"])
    result = run_suite(
        apply_overrides(get_suite("offline"), overrides),
        Endpoint(url=tiny_server.url, model=model),
        store=store,
        label="baseline",
        model_manifest_hash="tiny",
        overrides=overrides,
        paths=workspace["paths"],
    )
    yield result, store
    store.close()


def test_every_taskset_runs_through_verifiers_and_is_reported_separately(baseline):
    result, store = baseline
    assert [t.name for t in result.tasksets] == ["rg-math", "rg-logic"]
    for t in result.tasksets:
        assert (t.tasks, t.rollouts, t.failures) == (LIMIT, LIMIT, 0), t
        assert t.reward_mean is not None and 0.0 <= t.reward_mean <= 1.0
        assert 0 < t.output_tokens <= LIMIT * MAX_TOKENS
        assert t.output_tok_per_s is not None and t.output_tok_per_s > 0
        assert t.truncations <= t.rollouts and t.max_tokens == MAX_TOKENS
        assert all(e.ok and e.error is None for e in t.episodes)
    keys = sorted(e.task_key for e in result.taskset("rg-math").episodes)
    # verifiers' selection: the first N, no shuffle; the generators interleave
    assert keys == ["reasoning-gym:basic_arithmetic:seed0:size200:0", "reasoning-gym:gsm_symbolic:seed0:size200:0"]
    assert store.load_suite_result(result.suite_run_id) == result


def test_the_cli_runs_the_same_tasks_and_the_gate_pairs_them(baseline, tiny_server, workspace, repo_root):
    result, store = baseline
    common = ["--cache-dir", str(workspace["paths"].cache_dir)]
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "eval",
            "run",
            "--suite",
            "offline",
            "--url",
            tiny_server.url,
            "--limit",
            str(LIMIT),
            "--max-tokens",
            str(MAX_TOKENS),
            "--taskset",  # both, named: the gate pairs every taskset of the baseline's run
            "rg-logic",
            "--taskset",
            "rg-math",
            "--db",
            workspace["db"],
            "--label",
            "candidate",
            *common,
        ],
        capture_output=True,
        text=True,
        cwd=repo_root,
        timeout=540,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "rg-logic.rollouts: 2" in run.stdout and "rg-logic.failures: 0" in run.stdout
    assert run.stdout.index("rg-logic.rollouts") < run.stdout.index("rg-math.rollouts")  # in the order named
    candidate_id = int(
        next(line for line in run.stdout.splitlines() if line.startswith("suite_run_id:")).split()[1]
    )
    gate_command = [
        sys.executable, "-m", "eval", "gate", "--db", workspace["db"], "--manifest-hash", "tiny",
        "--baseline-suite", str(result.suite_run_id), "--candidate-suite", str(candidate_id),
    ]
    judged = subprocess.run(gate_command, capture_output=True, text=True, cwd=repo_root, timeout=120)
    # Two tasks cannot detect a 5-point drop: a judged gate refuses to pass on them
    assert judged.returncode == 1, judged.stdout + judged.stderr
    assert "rg-math: 2 tasks detect a 5% accuracy drop with power 0%" in judged.stdout
    gate = subprocess.run(gate_command + ["--task-tier", "smoke"], capture_output=True, text=True,
                          cwd=repo_root, timeout=120)
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert "rg-logic.lost: 0" in gate.stdout  # greedy, same server: the same answers
    assert "rg-logic.decision: not judged (smoke)" in gate.stdout
    row = store.decision_rows("tiny")[-1]
    assert row["passed"] and row["candidate_suite_run_id"] == candidate_id
    assert [v["name"] for v in row["evidence"]["tasksets"]] == ["rg-logic", "rg-math"]  # paired by name


def test_a_dead_server_is_refused_before_any_task_runs(tmp_path):
    suite = apply_overrides(get_suite("offline"), SuiteOverrides(limit=1, max_tokens=8))
    with pytest.raises(EndpointError, match="127.0.0.1:9"):
        run_suite(suite, Endpoint(url="http://127.0.0.1:9", model="tiny"), paths=EvalPaths(tmp_path))
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_episodes_against_a_dead_endpoint_are_operational_failures_not_zero_scores(tmp_path):
    # The server dies under a running taskset: verifiers records ok=false episodes; they are not scores.
    suite = apply_overrides(
        get_suite("offline"), SuiteOverrides(limit=1, max_tokens=8, tasksets=("rg-logic",))
    )
    launch = build_launch(
        suite,
        suite.tasksets[0],
        Endpoint(url="http://127.0.0.1:9", model="tiny"),
        locks=load_locks(),
        paths=EvalPaths(tmp_path),
        run_dir=tmp_path / "run",
    )
    t = run_taskset(launch, tmp_path / "run")
    assert (t.rollouts, t.failures, t.reward_mean) == (1, 1, None)
    assert t.episodes[0].reward is None and t.episodes[0].error


@pytest.mark.skipif(
    shutil.which("uv", path=harness_path()) is None,
    reason="verifiers' stock null harness needs uv (the eval extra installs it beside the interpreter)",
)
def test_the_stock_null_harness_also_runs_the_offline_suite(tiny_server, tmp_path):
    suite = apply_overrides(
        get_suite("offline"),
        SuiteOverrides(limit=1, max_tokens=8, harness="null", tasksets=("rg-math",)),
    )
    model = httpx.get(tiny_server.url + "/v1/models").json()["data"][0]["id"]
    result = run_suite(suite, Endpoint(url=tiny_server.url, model=model), paths=EvalPaths(tmp_path))
    [t] = result.tasksets
    assert (t.rollouts, t.failures) == (1, 0) and t.output_tokens > 0
