"""A standalone fidelity study: the loop's baseline protocol, then each candidate in a fresh launch.

This is what the GPU fidelity record runs (KV-cache 8/8, 4/4, 2/2; EXL3_INT8_GEMV 0 against 2). The
baseline goes through the loop's baseline protocol (`TrialRunner._baseline_evidence`) without its speed
and task stages: the reference is captured on one baseline launch (skipped where the store holds one
for this model and probe set, unless --replace-reference), the noise floor is the baseline again in a
*fresh* launch; every candidate runs in its own fresh process (EXL3_* variables are read at import),
launched the loop's way (`autoresearch.ground.servers.ServerSpec`) and judged by eval's fidelity gate.

Usage:
    python -m autoresearch sweep --model DIR --baseline base.json --candidate kv8=kv8.json ... --db sqlite:///results.db

Exit status: 0 everything was measured and recorded, whatever the verdicts; 1 failed; 2 usage error.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from autoresearch.ground.errors import AutoresearchError
from autoresearch.ground.servers import ServerSpec
from autoresearch.measures.baseline import stored_reference
from eval.decision import FidelityPolicy, GatePolicy
from eval.errors import EvalConfigError, EvalError
from eval.fidelity import FidelityMeasurement, capture_reference, measure_fidelity
from eval.gate import gate_candidate
from eval.policy_args import (
    add_gate_policy_arguments,
    add_probe_arguments,
    gate_policy_from_args,
    probe_set_from_args,
)
from eval.probes import ProbeSet
from eval.records import Reference
from eval.store import EvalStore
from serving.config import ServingConfig
from serving.errors import ServingError
from serving.manifest import manifest_hash

__all__ = ["SweepOutcome", "build_parser", "command", "run_sweep"]


@dataclass(frozen=True, kw_only=True, slots=True)
class SweepOutcome:
    label: str
    measurement: FidelityMeasurement
    passed: bool
    decision_id: int
    reasons: tuple[str, ...]


def run_sweep(
    *,
    model_dir: Path,
    baseline_config_path: Path,
    candidates: list[tuple[str, Path]],
    probe_set: ProbeSet,
    store: EvalStore,
    model_manifest_hash: str,
    log_dir: Path,
    policy: FidelityPolicy,
    replace_reference: bool = False,
    startup_timeout_s: float = 900.0,
) -> tuple[Reference, FidelityMeasurement, list[SweepOutcome]]:
    """Capture (or reuse) the reference, measure the floor in a fresh launch, then each candidate."""
    spec = ServerSpec(model_dir=model_dir, log_dir=log_dir, pid_dir=log_dir / "servers",
                      startup_timeout_s=startup_timeout_s)  # a free port, no memory caps

    def launch(config_path: Path, log_name: str):
        return spec.launch(ServingConfig.from_json(config_path.read_text()), log_name)

    log_dir.mkdir(parents=True, exist_ok=True)
    baseline_label = f"baseline:{baseline_config_path.name}"
    reference = None if replace_reference else stored_reference(store, model_manifest_hash, probe_set)
    if reference is None:  # launch 0 has nothing else to do here: no speed, no suite
        with launch(baseline_config_path, "baseline-reference") as server:
            reference = capture_reference(server.url, probe_set, store=store, model_manifest_hash=model_manifest_hash,
                                          label=baseline_label, replace=replace_reference)
    with launch(baseline_config_path, "baseline-floor") as server:  # launch 1: a fresh process
        floor = measure_fidelity(server.url, reference, store=store, role="noise_floor", label=baseline_label)
    outcomes = []
    for label, path in candidates:
        with launch(path, f"candidate-{label}") as server:
            measured = measure_fidelity(server.url, reference, store=store, role="candidate", label=label)
        record = gate_candidate(store, model_manifest_hash=model_manifest_hash, candidate_label=label,
                                baseline_label=baseline_label, policy=GatePolicy(fidelity=policy),
                                floor=floor, candidate_fidelity=measured)
        outcomes.append(SweepOutcome(label=label, measurement=measured, passed=record.decision.passed,
                                     decision_id=record.decision_id, reasons=record.decision.reasons))
    return reference, floor, outcomes


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m autoresearch sweep", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="model folder the server loads")
    parser.add_argument("--baseline", type=Path, required=True, help="baseline serving config JSON")
    parser.add_argument("--candidate", action="append", default=[], required=True, metavar="NAME=CONFIG.json",
                        help="a candidate serving config JSON and its label (repeatable)")
    parser.add_argument("--db", required=True, help="results store URL, e.g. sqlite:///results.db")
    parser.add_argument("--manifest-hash", help="default: the model's manifest hash (serving.manifest), as the "
                        "loop records it, so a reference captured here is found by the loop and the other way round")
    parser.add_argument("--log-dir", type=Path, default=Path("runs/fidelity"),
                        help="server logs and pid files (default runs/fidelity)")
    parser.add_argument("--replace-reference", action="store_true",
                        help="capture the baseline's reference again even where the store has one for these probes")
    parser.add_argument("--startup-timeout-s", type=float, default=900.0,
                        help="seconds a server may take to load and answer /health (default 900)")
    add_probe_arguments(parser)
    add_gate_policy_arguments(parser)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug lines on the terminal")
    return parser


def command(args: argparse.Namespace) -> int:
    """Run the sweep the parsed arguments ask for and print its record; errors are one clear line."""
    try:
        return _sweep(args)
    except (AutoresearchError, EvalError, ServingError) as exc:
        print(f"{type(exc).__name__}: {exc}")
        if getattr(exc, "log_tail", ""):
            print(exc.log_tail)
        return 1


def _sweep(args: argparse.Namespace) -> int:
    from rich.console import Console

    from eval import report

    candidates = []
    for item in args.candidate:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise EvalConfigError(f"--candidate expects NAME=CONFIG.json, got {item!r}")
        candidates.append((name, Path(path)))
    manifest = args.manifest_hash or manifest_hash(args.model)
    store = EvalStore(args.db)
    try:
        reference, floor, outcomes = run_sweep(
            model_dir=args.model, baseline_config_path=args.baseline, candidates=candidates,
            probe_set=probe_set_from_args(args), store=store, model_manifest_hash=manifest, log_dir=args.log_dir,
            policy=gate_policy_from_args(args).fidelity, replace_reference=args.replace_reference,
            startup_timeout_s=args.startup_timeout_s)
    finally:
        store.close()
    report.print_fidelity(Console(), [("baseline (noise floor)", floor.metrics)]
                          + [(o.label, o.measurement.metrics) for o in outcomes])
    _print_record(manifest, reference, floor, outcomes)
    return 0


def _print_record(manifest: str, reference: Reference, floor: FidelityMeasurement, outcomes: list[SweepOutcome]) -> None:
    print(f"model_manifest_hash: {manifest}")
    print(f"reference_id: {reference.reference_id}")
    print(f"probe_set_digest: {reference.probe_set_digest}")
    for probe in reference.probes:
        print(f"{probe.probe_id}.prompt_tokens: {len(probe.prompt_ids)}")
    print(f"noise_floor.measurement_id: {floor.measurement_id}")
    print(f"noise_floor.kl_mean: {floor.metrics.kl_mean:.6g}")
    for o in outcomes:
        m = o.measurement.metrics
        print(f"{o.label}.gate: {'pass' if o.passed else 'fail'}")
        print(f"{o.label}.kl_mean: {m.kl_mean:.6g}")
        print(f"{o.label}.kl_p99: {m.kl_p99:.6g}")
        print(f"{o.label}.top1_agreement: {m.top1_agreement:.6f}")
        print(f"{o.label}.top1_decisive_agreement: {m.top1_gated_agreement:.6f}")
        print(f"{o.label}.greedy_match_fraction: {m.greedy_match_fraction:.4f}")
        print(f"{o.label}.decision_id: {o.decision_id}")
        for reason in o.reasons:
            print(f"{o.label}.reason: {reason}")
