"""CLI of the intelligence gate.

Usage:
    python -m eval setup [--check]                        # pinned prime-environments -> installed tasksets
    python -m eval data NAME|all [--check]                # download + verify a pinned Hub dataset
    python -m eval image [--no-build]                     # the Prime suites' runtime image (Docker)
    python -m eval run --suite NAME --dry-run             # validate a suite's configuration, no model
    python -m eval run --suite offline --url URL [--limit N --max-tokens N] [--db URL] [--paired-with ID]
    python -m eval fidelity capture --url URL --db URL --manifest-hash H
    python -m eval fidelity measure --url URL --db URL --manifest-hash H --role candidate --label L
    python -m eval gate --db URL --manifest-hash H --floor ID --candidate ID [--baseline-suite ID --candidate-suite ID]

eval judges and never launches a server: the fidelity sweep (baseline twice, each candidate in a
fresh launch) is `python -m autoresearch sweep`; `python -m eval fidelity sweep` says so and exits 2.

Exit status: 0 ok (gate: the candidate passed), 1 failed, 2 usage error.

The parser and one short function per subcommand, each a thin use of the package's own functions; the Prime
supply chain's subcommands (setup, data, image) are eval.supply_chain's.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.logging import RichHandler
from rich.text import Text

from eval import supply_chain
from eval.errors import EvalConfigError
from eval.policy_args import (
    add_gate_policy_arguments,
    add_probe_arguments,
    add_task_policy_arguments,
    gate_policy_from_args,
    probe_set_from_args,
    task_policy_from_args,
)
from tuner_errors import TunerError

console = Console()
SWEEP_MOVED = "python -m autoresearch sweep --model DIR --baseline B.json --candidate NAME=C.json ... --db URL"


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _read_key(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        key = path.read_text().strip()
    except OSError as exc:
        raise EvalConfigError(f"cannot read the API key file {path}: {exc.strerror}") from None
    if not key:
        raise EvalConfigError(f"the API key file {path} is empty")
    return key


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--cache-dir", type=Path, help="sources, data and runs (default $EVAL_CACHE_DIR or .cache/eval)"
    )
    p.add_argument("--locks-dir", type=Path, help="lock files (default: locks/ of this checkout)")
    p.add_argument("-v", "--verbose", action="store_true")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m eval", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    supply_chain.add_parsers(sub, _add_common)

    run = sub.add_parser("run", help="run a suite through verifiers against a server")
    run.add_argument("--suite", required=True)
    target = run.add_mutually_exclusive_group(required=True)
    target.add_argument("--url", help="server root, e.g. http://127.0.0.1:18020")
    target.add_argument("--dry-run", action="store_true", help="validate the suite's configuration only")
    run.add_argument("--model", help="served model name (default: the one /v1/models lists)")
    run.add_argument("--api-key-file", type=Path)
    run.add_argument("--limit", type=_positive_int, help="tasks per taskset (overrides the suite)")
    run.add_argument("--max-tokens", type=_positive_int, help="output tokens per call (overrides the suite)")
    run.add_argument("--concurrency", type=_positive_int, help="requests in flight (overrides the suite)")
    run.add_argument(
        "--harness", help="verifiers harness id (offline default: eval-chat; Prime suites: null)"
    )
    run.add_argument("--runtime-image", help="docker image for the Prime suites' runtime (default: the project's, "
                     "`python -m eval image`)")
    run.add_argument("--runtime", choices=("docker", "subprocess"), help="where the harness runs (default: the suite's)")
    run.add_argument("--taskset", action="append", default=[], help="run only this taskset (repeatable)")
    run.add_argument("--db", help="results.db URL to store the run in, e.g. sqlite:///results.db")
    run.add_argument("--label", default="", help="what was measured (e.g. the serving config digest)")
    run.add_argument("--paired-with", type=_positive_int, metavar="SUITE_RUN_ID",
                     help="the baseline's stored run of this suite: stop each taskset as soon as the sequential "
                     "paired test has decided (needs --db)")
    add_task_policy_arguments(run)
    run.add_argument("--manifest-hash", help="model manifest hash recorded with the run")
    run.add_argument("--output", type=Path, help="dry-run: write each resolved EvalConfig JSON here")
    _add_common(run)

    fid = sub.add_parser("fidelity", help="fidelity against the baseline's reference")
    fsub = fid.add_subparsers(dest="fidelity_command", required=True)
    cap = fsub.add_parser("capture", help="capture the reference on the baseline server")
    cap.add_argument("--url", required=True)
    cap.add_argument(
        "--replace", action="store_true", help="replace a stored reference (drops its measurements)"
    )
    meas = fsub.add_parser("measure", help="measure a server against the stored reference")
    meas.add_argument("--url", required=True)
    meas.add_argument("--role", choices=("noise_floor", "candidate"), required=True)
    for p in (cap, meas):
        p.add_argument("--db", required=True)
        p.add_argument("--manifest-hash", required=True)
        p.add_argument("--label", default="baseline")
        p.add_argument("--api-key-file", type=Path)
        add_probe_arguments(p)
        _add_common(p)
    # The sweep launches servers; eval only judges. It moved to the loop's package (autoresearch sweep).
    fsub.add_parser("sweep", help=f"moved: {SWEEP_MOVED}", add_help=False)  # main() answers it

    gate = sub.add_parser(
        "gate", help="decide on stored measurements and suite runs, and record the decision"
    )
    gate.add_argument("--db", required=True)
    gate.add_argument("--manifest-hash", required=True)
    gate.add_argument("--floor", type=int, help="noise-floor measurement id")
    gate.add_argument("--candidate", type=int, help="candidate measurement id")
    gate.add_argument("--baseline-suite", type=int, help="baseline suite run id")
    gate.add_argument("--candidate-suite", type=int, help="candidate suite run id")
    gate.add_argument("--candidate-label", default="candidate")
    gate.add_argument("--baseline-label", default="baseline")
    add_gate_policy_arguments(gate)
    _add_common(gate)

    return parser


def setup_logging(verbose: bool) -> None:
    level = logging.DEBUG if verbose else logging.INFO
    if console.is_terminal:
        logging.basicConfig(
            level=level, handlers=[RichHandler(console=console, show_path=False)], format="%(message)s"
        )
    else:
        logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)


def _paths(args):
    from eval.paths import EvalPaths

    return EvalPaths(args.cache_dir.resolve()) if args.cache_dir else EvalPaths.default()


def _locks(args):
    from eval.prime import load_locks

    return load_locks(args.locks_dir)


def cmd_run(args) -> int:
    from eval import report
    from eval.runner import dry_run, new_run_dir, run_suite
    from eval.suites import SuiteOverrides, apply_overrides, get_suite
    from openai_client import ClientConfigError, Endpoint

    overrides = SuiteOverrides(
        limit=args.limit,
        max_tokens=args.max_tokens,
        harness=args.harness,
        runtime_image=args.runtime_image,
        runtime=args.runtime,
        tasksets=tuple(args.taskset),
        max_concurrent=args.concurrency,
    )
    suite = apply_overrides(get_suite(args.suite), overrides)
    locks, paths = _locks(args), _paths(args)
    if args.dry_run:
        output = args.output or new_run_dir(paths, f"{suite.name}-dry-run")
        entries = dry_run(suite, locks=locks, paths=paths, run_dir=output, model=args.model or "dry-run")
        output.mkdir(parents=True, exist_ok=True)
        for entry in entries:
            (output / f"{entry.name}.eval-config.json").write_text(json.dumps(entry.config, indent=2))
            print(f"{entry.name}.config: valid ({entry.validated})")
            print(f"{entry.name}.environment_installed: {entry.environment_installed}")
            if entry.dataset is not None:
                print(
                    f"{entry.name}.dataset: {entry.dataset} ({'verified' if entry.dataset_ready else 'not downloaded'})"
                )
        print(f"suite: {suite.name} configuration valid; resolved configs in {output}")
        return 0
    try:
        endpoint = Endpoint(url=args.url, model=args.model, api_key=_read_key(args.api_key_file))
    except ClientConfigError as exc:
        raise EvalConfigError(f"--url: {exc}") from exc
    store = None
    if args.db:
        from eval.store import EvalStore

        store = EvalStore(args.db)
    paired_with = None
    if args.paired_with:
        if store is None:
            raise EvalConfigError("--paired-with reads the baseline's run from --db; give --db")
        paired_with = store.load_suite_result(args.paired_with)
    result = run_suite(
        suite,
        endpoint,  # without --model: the one the server lists first
        store=store,
        label=args.label,
        model_manifest_hash=args.manifest_hash,
        overrides=overrides,
        locks=locks,
        paths=paths,
        paired_with=paired_with,
        policy=task_policy_from_args(args),
    )
    if console.is_terminal:
        report.print_suite(console, result)
    for line in report.suite_lines(result):
        print(line)
    failures = sum(t.failures for t in result.tasksets)
    if failures:
        console.print(
            f"[red]{failures} episode(s) failed operationally (ok=false); see {result.run_dir}[/red]"
        )
        return 1
    return 0


def cmd_fidelity(args) -> int:
    from eval import report
    from eval.fidelity import capture_reference, measure_fidelity
    from eval.store import EvalStore

    store = EvalStore(args.db)
    probes = probe_set_from_args(args)
    api_key = _read_key(args.api_key_file)
    if args.fidelity_command == "capture":
        reference = capture_reference(
            args.url,
            probes,
            store=store,
            model_manifest_hash=args.manifest_hash,
            label=args.label,
            api_key=api_key,
            replace=args.replace,
        )
        print(f"reference_id: {reference.reference_id}")
        print(f"probe_set_digest: {reference.probe_set_digest}")
        print(f"positions: {reference.n_positions}")
        for probe in reference.probes:
            print(f"{probe.probe_id}.prompt_tokens: {len(probe.prompt_ids)}")
        return 0
    reference = store.load_reference(args.manifest_hash, probes.digest)
    measured = measure_fidelity(
        args.url, reference, store=store, role=args.role, label=args.label, api_key=api_key
    )
    report.print_fidelity(console, [(args.label, measured.metrics)])
    print(f"measurement_id: {measured.measurement_id}")
    for key in ("kl_mean", "kl_p99", "kl_max", "top1_agreement", "top1_decisive_agreement", "greedy_match_fraction"):
        print(f"{key}: {getattr(measured.metrics, key):.6g}")
    return 0


def cmd_gate(args) -> int:
    from eval import report
    from eval.fidelity import FidelityMeasurement
    from eval.gate import gate_candidate
    from eval.store import EvalStore

    store = EvalStore(args.db)

    def measurement(mid: int | None, role: str):
        if mid is None:
            return None
        return FidelityMeasurement(
            measurement_id=mid,
            role=role,
            label=role,
            metrics=store.load_measurement(mid),
            per_probe=(),
            elapsed_s=0.0,
        )

    record = gate_candidate(
        store,
        model_manifest_hash=args.manifest_hash,
        candidate_label=args.candidate_label,
        baseline_label=args.baseline_label,
        policy=gate_policy_from_args(args),
        floor=measurement(args.floor, "noise_floor"),
        candidate_fidelity=measurement(args.candidate, "candidate"),
        baseline_suite=store.load_suite_result(args.baseline_suite) if args.baseline_suite else None,
        candidate_suite=store.load_suite_result(args.candidate_suite) if args.candidate_suite else None,
    )
    report.print_decision(console, args.candidate_label, record.decision)
    print(f"decision_id: {record.decision_id}")
    print(f"passed: {record.decision.passed}")
    for verdict in record.decision.tasksets:
        print(f"{verdict.name}.decision: {verdict.decision}")
        print(f"{verdict.name}.tasks_used: {verdict.tasks_used} of {verdict.paired_tasks}")
        print(f"{verdict.name}.lost: {verdict.lost}")
        print(f"{verdict.name}.gained: {verdict.gained}")
        print(f"{verdict.name}.power: {verdict.power:.3f}")
    return 0 if record.decision.passed else 1


COMMANDS = {"run": cmd_run, "fidelity": cmd_fidelity, "gate": cmd_gate}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["workload"]:
        print("error: `python -m eval workload` moved (a suite as bench's workload joins two peers); run "
              "python -m autoresearch workload --suite NAME --out FILE", file=sys.stderr)
        return 2
    if argv[:2] == ["fidelity", "sweep"]:
        print(f"error: `python -m eval fidelity sweep` moved (eval judges and launches no server); run {SWEEP_MOVED}",
              file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    setup_logging(args.verbose)
    try:
        if args.command in supply_chain.COMMANDS:
            return supply_chain.COMMANDS[args.command](args, _paths(args))
        return COMMANDS[args.command](args)
    except TunerError as exc:
        # Text, not markup: messages quote lists and paths with brackets.
        console.print(Text.assemble((type(exc).__name__, "red"), f": {exc}"), highlight=False, soft_wrap=True)
        if getattr(exc, "log_tail", ""):
            console.print(exc.log_tail, highlight=False, markup=False)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
