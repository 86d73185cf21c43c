"""Measure prefill and decode speed of any OpenAI-compatible server; compare stored results.

Usage:
    python -m bench --url URL [--api-key-file PATH] [--prefill 1024,8192,32768] [--decode 1024,8192]
                    [--repeats N] [--json OUT]
    python -m bench compare BASELINE.json CANDIDATE.json [--noise-floor A.json B.json]
    python -m bench noise-floor A.json B.json      # same configuration, two fresh launches
    python -m bench reference TABLE.json ROW=RESULT.json ...   # reproduce a published table (bench.reference)

Loaded results get run_bench's stall check (bench.ladder.mark_stalls), so records made before it
are judged by the same rule.

Exit status: 0 measured, 1 the run failed (or a point has no valid run, or the table was not
reproduced), 2 usage or plan error.
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

from bench.corpus import KINDS
from bench.errors import BenchConfigError, BenchError
from bench.ladder import mark_stalls, run_bench
from bench.plan import BenchPlan
from bench.records import BenchResult
from bench.reference import ReferenceTable, check_reference
from bench.report import (
    render,
    render_comparisons,
    render_noise_floor,
    render_reference,
    summary_lines,
    write_json,
)
from bench.stats import DifferenceRule, compare, noise_floor
from bench.workload import Workload
from openai_client import Endpoint
from tuner_errors import TunerError

log = logging.getLogger("bench")


def _tokens(text: str) -> tuple[int, ...]:
    """'1024,8K' -> (1024, 8192); 'none' or '' -> ()."""
    if text.strip().lower() in ("", "none"):
        return ()
    out = []
    for part in text.split(","):
        part = part.strip().lower()
        scale = 1024 if part.endswith("k") else 1
        try:
            out.append(int(part.removesuffix("k")) * scale)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r} is not a token count (e.g. 1024 or 8K)") from None
    return tuple(out)


def _json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value


def _kinds(text: str) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    if not kinds:  # the plan checks the names: corpus kinds, or a --workload's own
        raise argparse.ArgumentTypeError(f"prompt kinds: a comma-separated list, got {text!r}")
    return kinds


def _measure_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="Measure cold prefill (TTFT ladder) and batch-1 decode of an OpenAI-compatible server.",
        epilog="Subcommands: 'python -m bench compare -h', 'python -m bench noise-floor -h', "
        "'python -m bench reference -h'.",
    )
    p.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:18020")
    p.add_argument("--api-key-file", type=Path, help="file holding the API key (never echoed or saved)")
    p.add_argument("--model", help="model id to request (default: the first one /v1/models lists)")
    p.add_argument("--api", choices=("chat", "completions"), default="chat", help="endpoint to measure")
    p.add_argument(
        "--prefill", type=_tokens, default=(1024, 8192, 32768), help="prompt lengths, e.g. 1024,8K"
    )
    p.add_argument(
        "--decode", type=_tokens, default=(1024, 8192), help="context lengths before decoding ('none': skip)"
    )
    p.add_argument("--decode-kinds", type=_kinds, default=None,
                   help="prompt kinds for decode: math,code,mc (default: all, or every kind of --workload)")
    p.add_argument("--workload", type=Path,
                   help="decode on these tasks instead of the corpus (a bench workload JSON, e.g. from "
                        "`python -m autoresearch workload --suite offline`): one decode point per kind and context")
    p.add_argument("--decode-tokens", type=int, default=256,
                   help="output length per decode run: exactly this, or at most this with --decode-until eos")
    p.add_argument("--decode-until", choices=("length", "eos"), default="length",
                   help="length: ignore_eos, every run exactly --decode-tokens; eos: the model's own answers, "
                   "each ending at its end of sequence (drafting predicts the text past an answer far better "
                   "than the answer: use eos where the model answers within --decode-tokens)")
    p.add_argument("--decode-min-tokens", type=int, default=16,
                   help="with --decode-until eos: shorter answers are invalid runs (too short to time decode)")
    p.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="valid measured runs per point at least; more are taken until the spread is small",
    )
    p.add_argument(
        "--max-repeats", type=int, help="measured runs per point at most (default: max(10, --repeats))"
    )
    p.add_argument("--warmup", type=int, default=2, help="discarded requests before the first point")
    p.add_argument(
        "--prefill-target-ci", type=float, default=0.05, help="stop at this relative half-interval"
    )
    p.add_argument("--decode-target-ci", type=float, default=0.02, help="stop at this relative half-interval")
    p.add_argument(
        "--max-cached-tokens",
        type=int,
        default=None,
        help="cached prompt tokens tolerated per run (default: the opening every prompt shares, as the server "
        "reports it on unique prompts, plus 4 tokens of chance nonce match)",
    )
    p.add_argument(
        "--extra-body",
        type=_json_object,
        default={},
        help="server-specific request fields as JSON, e.g. '{\"ban_eos_token\": true}' for TabbyAPI",
    )
    p.add_argument("--salt", help="prompt salt (default: random); prompts are unique per salt")
    p.add_argument("--gpu-index", type=int, default=0,
                   help="the server's GPU as a CUDA ordinal under this process's CUDA_VISIBLE_DEVICES "
                        "(0: its first entry; NVML device 0 when it is unset): run bench with the server's "
                        "CUDA_VISIBLE_DEVICES")
    p.add_argument("--no-gpu", action="store_true", help="no NVML telemetry (remote server)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per request")
    p.add_argument("--json", type=Path, help="write the full result records here")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def _compare_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench compare",
        description="Apply the difference rule (bench.stats) to two stored results, metric by metric.",
    )
    p.add_argument("baseline", type=Path)
    p.add_argument("candidate", type=Path)
    p.add_argument("--noise-floor", type=Path, nargs=2, metavar=("A", "B"), help="same config, two launches")
    p.add_argument("--min-effect", type=float, default=0.01, help="smallest relative difference ever called")
    p.add_argument("--noise-factor", type=float, default=2.0, help="margin = factor x noise floor")
    p.add_argument(
        "--metrics",
        choices=("all", "client", "server"),
        default="all",
        help="which timings to compare (a peer server that reports no timings of its own: client); "
        "a chosen metric that either side lacks is an error, never skipped",
    )
    p.add_argument("--json", type=Path)
    return p


def _chosen_metrics(which: str, *sides: dict) -> list[str]:
    names = sorted({m for side in sides for m in side})
    return names if which == "all" else [m for m in names if f"_{which}@" in m]


def _noise_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench noise-floor",
        description="Launch-to-launch noise of one configuration: |median_b / median_a - 1| per metric.",
    )
    p.add_argument("first", type=Path)
    p.add_argument("second", type=Path)
    p.add_argument("--json", type=Path)
    return p


def _reference_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench reference",
        description="Check bench results against a published table, up to one machine factor per metric family.",
    )
    p.add_argument("table", type=Path, help="reference table JSON (see bench/reference.py)")
    p.add_argument(
        "results", nargs="+", metavar="ROW=RESULT.json", help="a table row and its bench result JSON"
    )
    p.add_argument("--json", type=Path, help="write the check here")
    return p


def setup_logging(verbose: bool) -> None:
    handler: logging.Handler = (
        RichHandler(show_path=False) if sys.stderr.isatty() else logging.StreamHandler(sys.stderr)
    )
    if not isinstance(handler, RichHandler):
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[handler], force=True)
    logging.getLogger("httpx").setLevel(logging.INFO if verbose else logging.WARNING)


def _load(path: Path) -> BenchResult:
    try:
        return mark_stalls(BenchResult.from_dict(json.loads(path.read_text(encoding="utf-8"))))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BenchError(f"{path} is not a bench result JSON ({type(exc).__name__}: {exc})") from exc


def _measure(argv: Sequence[str], console: Console) -> int:
    args = _measure_parser().parse_args(argv)
    setup_logging(args.verbose)
    workload = Workload.load(args.workload) if args.workload else None
    kinds = args.decode_kinds or (workload.kind_names if workload else KINDS)
    plan = BenchPlan(
        prefill_tokens=args.prefill,
        decode_context_tokens=args.decode,
        decode_kinds=kinds,
        workload=workload.summary() if workload else None,
        decode_tokens=args.decode_tokens,
        decode_until=args.decode_until,
        decode_min_tokens=args.decode_min_tokens,
        min_repeats=args.repeats,
        max_repeats=args.max_repeats if args.max_repeats is not None else max(10, args.repeats),
        warmup_requests=args.warmup,
        prefill_target_rel_ci=args.prefill_target_ci,
        decode_target_rel_ci=args.decode_target_ci,
        max_cached_tokens=args.max_cached_tokens,
        api=args.api,
        request_timeout_s=args.timeout,
        gpu_index=None if args.no_gpu else args.gpu_index,
        extra_body=args.extra_body,
        **({"salt": args.salt} if args.salt else {}),
    )
    endpoint = Endpoint.from_key_file(args.url, args.api_key_file, args.model)
    result = run_bench(plan, endpoint, workload=workload)
    render(result, console)
    print("\n".join(summary_lines(result)))
    if args.json:
        write_json(result.to_dict(), args.json)
        log.info("wrote %s", args.json)
    empty = [p.key for p in (*result.prefill, *result.decode) if not p.valid_runs]
    if empty:
        console.print(f"[red]no valid run at {', '.join(empty)}[/red]: see the invalid-run reasons above")
        return 1
    return 0


def _compare(argv: Sequence[str], console: Console) -> int:
    args = _compare_parser().parse_args(argv)
    setup_logging(False)
    rule = DifferenceRule(min_effect_rel=args.min_effect, noise_factor=args.noise_factor)
    floor = None
    if args.noise_floor:
        a, b = (_load(p) for p in args.noise_floor)
        floor = noise_floor(a.samples(), b.samples())
        render_noise_floor(floor, console)
    else:
        console.print(
            "[yellow]no --noise-floor: launch-to-launch noise is unknown, so margins are the minimum "
            f"effect ({rule.min_effect_rel:.1%}) alone[/yellow]"
        )
    baseline, candidate = _load(args.baseline), _load(args.candidate)
    metrics = _chosen_metrics(args.metrics, baseline.samples(), candidate.samples())
    comparisons = compare(baseline.samples(), candidate.samples(), rule=rule, noise_floor=floor, metrics=metrics)
    render_comparisons(comparisons, console)
    for c in comparisons:
        print(f"{c.metric}: {c.verdict} {c.ratio:.4f}")
    if args.json:
        write_json({"rule": _rule_dict(rule), "comparisons": [c.to_dict() for c in comparisons]}, args.json)
    return 0


def _rule_dict(rule: DifferenceRule) -> dict[str, float]:
    return {
        "min_effect_rel": rule.min_effect_rel,
        "noise_factor": rule.noise_factor,
        "confidence": rule.confidence,
    }


def _noise(argv: Sequence[str], console: Console) -> int:
    args = _noise_parser().parse_args(argv)
    setup_logging(False)
    floor = noise_floor(_load(args.first).samples(), _load(args.second).samples())
    render_noise_floor(floor, console)
    for metric, value in floor.rel_diff:
        print(f"{metric}: {value:.4f}")
    if args.json:
        write_json(floor.to_dict(), args.json)
    return 0


def _reference(argv: Sequence[str], console: Console) -> int:
    args = _reference_parser().parse_args(argv)
    setup_logging(False)
    results = {}
    for item in args.results:
        row, sep, path = item.partition("=")
        if not sep or not row or not path:
            raise BenchConfigError(f"expected ROW=RESULT.json, got {item!r}")
        if row in results:
            raise BenchConfigError(f"row {row!r} given twice")
        results[row] = _load(Path(path))
    check = check_reference(ReferenceTable.from_json(args.table), results)
    render_reference(check, console)
    if args.json:
        write_json(check.to_dict(), args.json)
    return 0 if check.ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    console = Console() if sys.stdout.isatty() else Console(width=160)  # logs and CI: no wrapping
    commands = {"compare": _compare, "noise-floor": _noise, "reference": _reference}
    command = commands.get(argv[0]) if argv else None
    try:
        if command is not None:
            return command(argv[1:], console)
        return _measure(argv, console)
    except TunerError as exc:  # a usage error (a ValueError of the tree) is 2, the others 1
        console.print(f"[red]{type(exc).__name__}[/red]: {exc}")
        return 2 if isinstance(exc, ValueError) else 1


if __name__ == "__main__":
    raise SystemExit(main())
