"""The command line of `python -m autoresearch`: one subcommand per job, each with only its own flags.

Why its own module: the flags are many (the run's alone fill a screen), and each command's help must list the
flags that command reads, no more; `__main__` turns the parsed arguments into a plan and runs it.
`python -m autoresearch` with no command, or with flags first (`--suite broad ...`), is `run`, as it always was.

Usage:
    args = parse_args(["export", "--study", "q27-champion"])  # every flag of run present, at its default
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from autoresearch.night_plan import add_rate_arguments
from eval.policy_args import add_task_policy_arguments
from eval.suites import SUITES

__all__ = ["COMMANDS", "DEFAULT_STORAGE", "build_parser", "parse_args"]

DEFAULT_STORAGE = "sqlite:///results.db"
# sweep and workload parse their own flags (autoresearch.trial.sweep, autoresearch.ground.workload); __main__ hands them over
OWN_PARSERS = {
    "sweep": "fidelity only: the baseline protocol, then each candidate in a fresh launch (flags: sweep --help)",
    "workload": "write the suite's tasks as a bench workload, for `python -m bench --workload` (flags: workload --help)",
}
COMMANDS = ("run", "export", "report", "plan", *OWN_PARSERS)
_FORMATTER = argparse.RawDescriptionHelpFormatter
_EPILOG = ("Exit status: 0 done, 1 the run failed (plan: the night cannot make its claim), 2 usage or storage error,\n"
           "130 interrupted (Ctrl-C). Ordinary failures are one line on stderr; tracebacks go to\n"
           "runs/<study>/loop.log (and the terminal with -v).")


class _Parser(argparse.ArgumentParser):
    """argparse whose refusal is one plain line and exit status 2, naming the help that lists the flags (its
    default prints the whole usage first); the commands' parsers are of this class too."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message} (flags: {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: the commands, each a subparser with its own flags."""
    return _build()[0]


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The command and its flags; a command line without a command is `run`. Every flag `run` has is present
    on the result (at its default where the command does not take it), because every command's plan is made
    by the same code (`__main__.make_plan`)."""
    argv = list(argv)
    if not argv or (argv[0] not in COMMANDS and argv[0] not in ("-h", "--help")):
        argv = ["run", *argv]
    top, subs = _build()
    args, unknown = top.parse_known_args(argv)
    if unknown:
        flag = next((a for a in unknown if a.startswith("-")), unknown[0]).split("=")[0]
        owners = [name for name, sub in subs.items() if flag in sub._option_string_actions]
        where = f"; it is a flag of {', '.join(owners)}" if owners and args.command not in owners else ""
        subs[args.command].error(f"unrecognized arguments: {' '.join(unknown)}{where}")
    for name, value in vars(subs["run"].parse_args([])).items():
        if not hasattr(args, name):
            setattr(args, name, value)
    return args


def _build() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    top = _Parser(
        prog="python -m autoresearch", formatter_class=_FORMATTER, epilog=_EPILOG,
        description="Find the fastest serving configuration that keeps the model's intelligence.\n\n"
                    "With no command, or with the run's flags first, it runs the study: python -m autoresearch "
                    "[run] [flags].\nEach command's flags: python -m autoresearch COMMAND --help")
    commands = top.add_subparsers(dest="command", title="commands", metavar="COMMAND")
    subs = {
        "run": commands.add_parser(
            "run", help="run or resume the study: trials, the finalists, the champion and RESULTS.md (the default)",
            description="Run or resume the study. Without --model: the embedded default (a tiny synthetic model "
                        "on the CPU engine, the offline suite shrunk to 2 tasks per taskset, 6 trials).",
            formatter_class=_FORMATTER, epilog=_EPILOG),
        "export": commands.add_parser(
            "export", help="write the champion as a serving config (or TabbyAPI's files), from the database alone",
            description="Write a study's champion (the minimal champion once it was shown faster than the baseline and "
                        "passed the gate) as this "
                        "project's serving config or as TabbyAPI's config.yml + exl3.env, from the database alone.",
            formatter_class=_FORMATTER, epilog=_EPILOG),
        "report": commands.add_parser(
            "report", help="write a study's RESULTS.md again, from the database alone",
            description="Write a study's RESULTS.md (and its Pareto plot) from the database alone: no model, no GPU.",
            formatter_class=_FORMATTER, epilog=_EPILOG),
        "plan": commands.add_parser(
            "plan", help="what --hours buys, without running: trials, task-tier judgments, power",
            description="The night plan without running, from a stored study (--study, default the database's only "
                        "study; --storage) or from rates stated for a machine one does not have (--decode-tok-s, "
                        "--prefill-tok-s, --answer-tokens). Exit status 1 when the night cannot make its claim.",
            formatter_class=_FORMATTER, epilog=_EPILOG),
    }
    for name, text in OWN_PARSERS.items():
        commands.add_parser(name, help=text, add_help=False)
    for name, parser in subs.items():
        _add_study(parser, reading=name != "run")
    _add_run(subs["run"])
    _add_export(subs["export"])
    _add_report(subs["report"])
    _add_plan(subs["plan"])
    return top, subs


def _add_study(parser: argparse.ArgumentParser, *, reading: bool) -> None:
    group = parser.add_argument_group("the study")
    group.add_argument("--study", help="study name (default: " + (
        "the database's only study)" if reading else "from suite, engine and model manifest)"))
    group.add_argument("--storage", default=DEFAULT_STORAGE,
                       help="Optuna/results storage URL: sqlite:///results.db (default) or postgresql://... "
                       "(shared by workers)")
    parser.add_argument("-v", "--verbose", action="store_true", help="tracebacks and debug lines on the terminal too")


def _suite_help() -> str:
    return (f"task suite: {', '.join(SUITES)}, or none (gate on fidelity only) (default: offline for the "
            "embedded default, broad with --model, whose task tier is a guard)")


def _add_run(parser: argparse.ArgumentParser) -> None:
    what = parser.add_argument_group("what is tuned")
    what.add_argument("--model", help="model folder, or a Hub id with revision (org/repo@rev); "
                      "absent: the embedded tiny synthetic model on the CPU engine")
    what.add_argument("--draft-model", help="a draft checkpoint of the same vocabulary (a small causal LM, or a "
                      "DFlash drafter; exllamav3 decides which): the study may then draft with it")
    what.add_argument("--engine", choices=["exllamav3", "transformers"],
                      help="default: the checkpoint's, as `python -m search_space` picks it (exllamav3 for an EXL3 "
                      "folder, else transformers)")
    what.add_argument("--suite", help=_suite_help())
    what.add_argument("--baseline", metavar="KNOB=VALUE[,KNOB=VALUE]",
                      help="judge candidates against the defaults with these changes, e.g. EXL3_INT8_GEMV=0 "
                      "(exact GEMV as the reference, so the gate decides whether int8 GEMV keeps fidelity)")
    what.add_argument("--pin", action="append", default=[], metavar="KNOB=VALUE",
                      help="hold a knob fixed (JSON value), e.g. --pin cache_tokens=32768")
    what.add_argument("--enqueue", action="append", default=[], metavar="KNOB=VALUE[,KNOB=VALUE]",
                      help="try this change of the baseline early (repeatable), e.g. --enqueue max_chunk_size=4096")
    what.add_argument("--no-levers", action="store_true",
                      help="do not enqueue the catalog's levers (each drafting mode the checkpoint allows, each "
                      "prefill chunk size: one change each, after the baseline and --enqueue) before the sampler")
    night = parser.add_argument_group("the night")
    night.add_argument("--trials", type=int, help="total trials in the study, baseline included (embedded default: 6)")
    night.add_argument("--hours", type=float, help="the whole run's deadline: a trial starts only while it and every "
                       "stage after the search still fit")
    night.add_argument("--seed", type=int, default=0, help="the sampler's seed (default 0; a shared study's workers "
                       "add their own identity)")
    machine = parser.add_argument_group("the machine")
    machine.add_argument("--vram", help="VRAM budget, e.g. 24GiB (an RTX 3090); default: the GPU's memory")
    machine.add_argument("--emulate-vram", action="store_true",
                         help="also cap each server's GPU memory at --vram (emulate a 3090 on a larger GPU)")
    machine.add_argument("--host-memory-limit", help="cap each server's memory (data segment), e.g. 2GiB: "
                         "emulate a smaller machine for the CPU engine; a server over it fails as out of memory")
    machine.add_argument("--port", type=int, default=0, help="pin the servers' port (default 0: a free port per launch)")
    outputs = parser.add_argument_group("outputs")
    outputs.add_argument("--results-md", type=Path, help="the report (default: RESULTS.md)")
    outputs.add_argument("--workdir", type=Path, default=Path("runs"),
                         help="server logs, configs, suite runs (default: runs)")
    _add_suite_shape(parser, runtime=True)
    _add_gate(parser)
    add_rate_arguments(parser.add_argument_group("the night plan's stated rates (the plan's inputs until measured)"))
    bench = parser.add_argument_group("bench")
    bench.add_argument("--bench-prefill", help="prefill ladder, token counts, e.g. 8192 (default: 8192 on GPU)")
    bench.add_argument("--bench-decode", help="decode contexts, e.g. 1024,8192 (default on GPU)")
    bench.add_argument("--bench-workload", default=None, metavar="suite|corpus|FILE",
                       help="what decode is measured on: the suite's own tasks, one decode point per taskset, "
                       "weighted as the suite weights them (default when a suite runs); bench's math corpus "
                       "(default with --suite none); or a bench workload JSON file")
    bench.add_argument("--bench-decode-tokens", type=int, help="tokens per decode run (default 128 on GPU)")
    bench.add_argument("--bench-decode-until", choices=("length", "eos"),
                       help="eos (default; a resumed study keeps its own): the model's own answers, up to "
                       "--bench-decode-tokens; length: every run exactly that many, past the answer (text there "
                       "flatters drafting)")
    bench.add_argument("--bench-max-repeats", type=int, help="measured runs per point at most (default 6 on GPU)")
    _add_crown(parser)
    shared = parser.add_argument_group("shared studies (several workers, one --storage)")
    shared.add_argument("--heartbeat", type=int, default=10,
                        help="seconds between a worker's heartbeats, for its trial and its claim to confirm the "
                        "finalists (default 10)")
    shared.add_argument("--grace", type=int, default=60,
                        help="seconds without a heartbeat after which another worker, on any host, retries the trial "
                        "or takes over the claim (default 60; well above the hosts' clock skew)")
    drift = parser.add_argument_group("drift (the baseline re-measured during the search)")
    drift.add_argument("--drift-every-trials", type=int, default=5, metavar="K",
                       help="re-measure the baseline in a fresh launch after every K trials (default 5; 0: not by count)")
    drift.add_argument("--drift-every-minutes", type=float, default=30.0, metavar="T",
                       help="... and after every T minutes (default 30; 0: not by time); docs/drift.md: what it costs")
    drift.add_argument("--no-drift-check", action="store_true",
                       help="never re-measure the baseline; prune on raw speeds against its first reading")


def _add_suite_shape(parser: argparse.ArgumentParser, *, runtime: bool) -> None:
    suite = parser.add_argument_group("the suite's size")
    suite.add_argument("--suite-limit", type=int, help="tasks per taskset (shrink a suite)")
    suite.add_argument("--suite-max-tokens", type=int, help="max output tokens per call in every taskset")
    suite.add_argument("--suite-tasksets", help="run only these tasksets of the suite, comma-separated")
    suite.add_argument("--suite-concurrency", type=int, help="task requests in flight (default: the suite's)")
    if runtime:
        suite.add_argument("--suite-runtime", choices=("docker", "subprocess"),
                           help="where the suite's harness runs (default: the suite's; docker for the Prime suites, "
                           "whose tasksets declare network policies only a container enforces; subprocess runs on "
                           "this host, for tasksets that declare none, e.g. the CPU stand-ins)")


def _add_gate(parser: argparse.ArgumentParser) -> None:
    gate = parser.add_argument_group("the gate")
    add_task_policy_arguments(gate)
    gate.add_argument("--min-floor-top1-disagreement", type=float,
                      help="fidelity: the top-1 disagreement floor assumed when the measured one is smaller "
                      "(default 0.002; limit = 3 x max(floor, this))")
    gate.add_argument("--min-floor-kl-mean", type=float, help="fidelity: the KL-mean floor, nats (default 1e-4)")
    gate.add_argument("--min-floor-kl-p99", type=float, help="fidelity: the KL 99th-percentile floor, nats "
                      "(default 1e-3)")


def _add_crown(parser: argparse.ArgumentParser, *, rank: bool = True) -> None:
    crown = parser.add_argument_group("the finalists and the champion")
    crown.add_argument("--finalists", type=int, default=2,
                       help="the best trials re-measured in fresh launches against the baseline (default 2)")
    crown.add_argument("--finalist-launches", type=int, default=2,
                       help="fresh launches of each finalist and of the baseline before the verdict's first look "
                       "(default 2, the least: a launch-to-launch spread needs two)")
    crown.add_argument("--finalist-max-launches", type=int,
                       help="launches a side the verdict may add, until it is decisive or the night's clock runs "
                       "out (default 8; 3 for the embedded default)")
    crown.add_argument("--min-speedup", type=float, default=1.02,
                       help="the smallest request-time speed-up worth a change: a finalist is crowned only when shown "
                       "faster than this, however sure (default 1.02)")
    crown.add_argument("--guard-tolerance", type=float, default=0.03,
                       help="a point (a kind of request's decode, a prefill length) shown slower than the baseline's by "
                       "more than this vetoes a crown (default 0.03)")
    if rank:
        crown.add_argument("--rank-by", choices=("time", "energy"), default="time",
                           help="what ranks best so far, the finalists and the champion: request time on the workload "
                           "(default), or energy per request under the GPU's own power limit (never changed; "
                           "--minimize then keeps energy per request)")
    crown.add_argument("--minimize", action=argparse.BooleanOptionalAction, default=None,
                       help="after the champion is confirmed, remove its changes one at a time (cheapest first) "
                       "while it stays as fast on request time (with --rank-by energy: uses no more energy per "
                       "request); export writes that minimal champion once it is shown faster than the baseline and "
                       "passed the gate (default: on with --model, off for the embedded default)")
    crown.add_argument("--minimize-launches", type=int, default=2,
                       help="fresh launches of each configuration per minimization round (default 2); with n "
                       "changes it makes at most L x (5n + 3) launches (the last 2L: the minimal champion against the "
                       "baseline)")
    crown.add_argument("--minimize-max-launches", type=int, help="stop the minimization after this many launches")


def _add_export(parser: argparse.ArgumentParser) -> None:
    out = parser.add_argument_group("the export")
    out.add_argument("--out", type=Path, help="where to write it (default: champion.json for --format serving, "
                     "the folder tabbyapi-export for --format tabbyapi; git ignores both)")
    out.add_argument("--format", choices=("serving", "tabbyapi"), default="serving",
                     help="this project's serving config (default), or TabbyAPI's config.yml + exl3.env, with the "
                     "settings TabbyAPI cannot express and their measured cost in NOT-EXPRESSED.md")
    out.add_argument("--full-champion", action="store_true",
                     help="export the confirmed champion even when a minimal champion passed the gate")


def _add_report(parser: argparse.ArgumentParser) -> None:
    parser.add_argument_group("the report").add_argument(
        "--results-md", type=Path, help="where to write it (default: beside --storage's SQLite database, so a "
        "committed study's never lands on yours; RESULTS.md in this folder for another database)")
    _add_gate(parser)


def _add_plan(parser: argparse.ArgumentParser) -> None:
    night = parser.add_argument_group("the night")
    night.add_argument("--hours", type=float, help="the night to plan, in hours (required)")
    night.add_argument("--suite", help=f"task suite: {', '.join(SUITES)} (default: the stored study's, else offline)")
    _add_suite_shape(parser, runtime=False)
    gate = parser.add_argument_group("the task tier")
    add_task_policy_arguments(gate)
    add_rate_arguments(parser.add_argument_group("the machine's rates (without --study)"))
    _add_crown(parser, rank=False)
