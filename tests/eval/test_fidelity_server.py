"""Fidelity end to end on the tiny model over real HTTP: reference, noise floor in a fresh launch, candidates."""

from __future__ import annotations

import subprocess
import sys

import pytest

from eval.decision import FidelityPolicy, GatePolicy, decide_fidelity
from eval.errors import EndpointError
from eval.fidelity import capture_reference, measure_fidelity
from eval.gate import gate_candidate
from eval.probes import build_probe_set
from eval.store import EvalStore
from tests.eval.conftest import TINY_PROBES

pytestmark = pytest.mark.slow

FP32 = {"engine": "transformers", "args": {"threads": 1}}  # the shared tiny_server's config
BF16 = {"engine": "transformers", "args": {"threads": 1, "dtype": "bfloat16"}}
MANIFEST = "tiny-model-seed-0"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    store = EvalStore(f"sqlite:///{tmp_path_factory.mktemp('fidelity') / 'results.db'}")
    yield store
    store.close()


@pytest.fixture(scope="module")
def reference(tiny_server, store):
    return capture_reference(
        tiny_server.url, build_probe_set(TINY_PROBES), store=store, model_manifest_hash=MANIFEST, label="fp32"
    )


@pytest.fixture(scope="module")
def floor(reference, store, launch_tiny):
    with launch_tiny(FP32, "fp32-floor") as server:
        return measure_fidelity(
            server.url, reference, store=store, role="noise_floor", label="fp32 fresh launch"
        )


def test_the_reference_holds_exact_token_ids_and_top_k_for_every_probe(reference, store):
    probes = build_probe_set(TINY_PROBES)
    assert [p.probe_id for p in reference.probes] == [p.probe_id for p in probes.probes]
    for probe, spec in zip(reference.probes, probes.probes, strict=True):
        assert len(probe.continuation_ids) == spec.continuation_tokens
        assert len(probe.prompt_ids) > 50
        assert all(len(row) == TINY_PROBES.top_k for row in probe.scores.top)
    long = reference.probes[-1]
    assert long.kind == "long_context" and len(long.prompt_ids) > 2 * len(reference.probes[0].prompt_ids)
    assert store.load_reference(MANIFEST, probes.digest).probes == reference.probes


def test_the_same_configuration_in_a_fresh_launch_is_the_noise_floor(floor):
    m = floor.metrics
    assert m.kl_max <= 1e-6 and m.top1_agreement == 1.0
    assert m.n_positions == 8 * TINY_PROBES.continuation_tokens + TINY_PROBES.long_continuation_tokens


def test_an_identical_candidate_stays_within_the_floor(reference, floor, store, launch_tiny):
    with launch_tiny(FP32, "fp32-candidate") as server:
        same = measure_fidelity(server.url, reference, store=store, role="candidate", label="fp32 again")
    verdict = decide_fidelity(same.metrics, floor.metrics, FidelityPolicy())
    assert verdict.passed, verdict.reasons
    assert same.metrics.greedy_match_fraction == floor.metrics.greedy_match_fraction


def test_bf16_lands_above_the_noise_floor_and_fails_the_gate(reference, floor, store, launch_tiny):
    with launch_tiny(BF16, "bf16-candidate") as server:
        bf16 = measure_fidelity(server.url, reference, store=store, role="candidate", label="bf16")
    policy = FidelityPolicy()
    limit = policy.noise_factor * max(floor.metrics.kl_mean, policy.min_floor_kl_mean)
    assert bf16.metrics.kl_mean > limit
    assert bf16.metrics.kl_mean > 10 * floor.metrics.kl_mean
    record = gate_candidate(
        store,
        model_manifest_hash=MANIFEST,
        candidate_label="bf16",
        baseline_label="fp32",
        policy=GatePolicy(fidelity=policy),
        floor=floor,
        candidate_fidelity=bf16,
    )
    assert not record.decision.passed and record.decision.failed_stage == "fidelity"
    row = store.decision_rows(MANIFEST)[-1]
    assert row["id"] == record.decision_id and row["candidate_measurement_id"] == bf16.measurement_id
    assert row["floor_measurement_id"] == floor.measurement_id
    assert row["evidence"]["candidate_metrics"]["kl_mean"] == pytest.approx(bf16.metrics.kl_mean)


def test_the_cli_captures_and_measures_against_the_stored_reference(tiny_server, tmp_path, repo_root):
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    probe_flags = [
        "--continuation-tokens",
        "4",
        "--long-context-tokens",
        "120",
        "--long-continuation-tokens",
        "2",
    ]

    def cli(*args):
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "eval",
                "fidelity",
                *args,
                "--db",
                db,
                "--manifest-hash",
                "cli",
                *probe_flags,
            ],
            capture_output=True,
            text=True,
            cwd=repo_root,
            timeout=300,
        )

    captured = cli("capture", "--url", tiny_server.url)
    assert captured.returncode == 0, captured.stdout + captured.stderr
    assert "reference_id: 1" in captured.stdout
    again = cli("capture", "--url", tiny_server.url)
    assert again.returncode == 1 and "--replace" in again.stdout
    measured = cli("measure", "--url", tiny_server.url, "--role", "candidate", "--label", "same-server")
    assert measured.returncode == 0, measured.stdout + measured.stderr
    assert "kl_mean: 0\n" in measured.stdout and "top1_agreement: 1\n" in measured.stdout


def test_a_dead_endpoint_is_an_endpoint_error(reference, store):
    with pytest.raises(EndpointError, match="failed"):
        measure_fidelity("http://127.0.0.1:9", reference, store=store, role="candidate", label="dead")


def test_the_old_sweep_command_points_to_the_loop(capsys):
    # eval judges and never launches a server: the sweep lives with the loop now
    from eval.__main__ import main

    assert main(["fidelity", "sweep", "--model", "m", "--baseline", "b.json"]) == 2
    assert "python -m autoresearch sweep" in capsys.readouterr().err

