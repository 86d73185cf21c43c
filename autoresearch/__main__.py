"""Find the fastest serving configuration that keeps the model's intelligence.

Usage:
    python -m autoresearch                                  # embedded default: tiny model, CPU, offline suite
    python -m autoresearch --suite broad --model DIR|ORG/REPO@REV [--trials N | --hours H] [--vram 24GiB]
                           [--study NAME] [--storage URL]
    python -m autoresearch export [--study NAME] [--storage URL] [--out champion.json] [--format serving|tabbyapi]
    python -m autoresearch report [--study NAME] [--storage URL]
    python -m autoresearch plan --hours H (--study NAME | --decode-tok-s R --prefill-tok-s R [--answer-tokens N])
                           # what a night buys, without running: trials, task-tier judgments, power
    python -m autoresearch sweep --model DIR --baseline B.json --candidate NAME=C.json ... --db URL
                           # fidelity only: the baseline protocol, then each candidate in a fresh launch
    python -m autoresearch workload --suite offline --out workload.json   # the suite's tasks for bench --workload

Exit status: 0 done, 1 the run failed (plan: the night cannot make its claim), 2 usage or storage error,
130 interrupted (Ctrl-C).
Ordinary failures are one line on stderr; tracebacks go to runs/<study>/loop.log (and the terminal with -v).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from autoresearch.ground.errors import PlanError, StorageError
from autoresearch.ground.logs import setup_logging
from autoresearch.night_plan import add_rate_arguments
from eval.policy_args import add_task_policy_arguments, task_policy_from_args
from tuner_errors import TunerError

log = logging.getLogger("autoresearch")
DEFAULT_STORAGE = "sqlite:///results.db"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m autoresearch", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", nargs="?", default="run", choices=["run", "export", "report", "plan", "sweep"],
                        help="run (default), export, report, plan; sweep has options of its own: "
                        "`python -m autoresearch sweep --help`")
    parser.add_argument("--model", help="model folder, or a Hub id with revision (org/repo@rev); "
                        "absent: the embedded tiny synthetic model on the CPU engine")
    parser.add_argument("--draft-model", help="a draft checkpoint of the same vocabulary (a small causal LM, or a "
                        "DFlash drafter; exllamav3 decides which): the study may then draft with it")
    parser.add_argument("--suite", help="task suite: offline, smoke, broad, quick, full, or none (gate on fidelity "
                        "only) (default: offline for the embedded default, broad with --model, whose task tier is "
                        "a guard)")
    parser.add_argument("--enqueue", action="append", default=[], metavar="KNOB=VALUE[,KNOB=VALUE]",
                        help="try this change of the baseline early (repeatable), e.g. --enqueue max_chunk_size=4096")
    parser.add_argument("--no-levers", action="store_true",
                        help="do not enqueue the catalog's levers (each drafting mode the checkpoint allows, each "
                        "prefill chunk size: one change each, after the baseline and --enqueue) before the sampler")
    parser.add_argument("--baseline", metavar="KNOB=VALUE[,KNOB=VALUE]",
                        help="judge candidates against the defaults with these changes, e.g. EXL3_INT8_GEMV=0 "
                        "(exact GEMV as the reference, so the gate decides whether int8 GEMV keeps fidelity)")
    parser.add_argument("--engine", choices=["exllamav3", "transformers"],
                        help="default: the checkpoint's, as `python -m search_space` picks it (exllamav3 for an EXL3 "
                        "folder, else transformers)")
    parser.add_argument("--trials", type=int, help="total trials in the study, baseline included (embedded default: 6)")
    parser.add_argument("--hours", type=float, help="stop starting trials after this many hours")
    parser.add_argument("--vram", help="VRAM budget, e.g. 24GiB (an RTX 3090); default: the GPU's memory")
    parser.add_argument("--emulate-vram", action="store_true",
                        help="also cap each server's GPU memory at --vram (emulate a 3090 on a larger GPU)")
    parser.add_argument("--host-memory-limit", help="cap each server's memory (data segment), e.g. 2GiB: "
                        "emulate a smaller machine for the CPU engine; a server over it fails as out of memory")
    parser.add_argument("--study", help="study name (default: from suite, engine and model manifest)")
    parser.add_argument("--storage", default=DEFAULT_STORAGE,
                        help="Optuna/results storage URL: sqlite:///results.db or postgresql://... (shared by workers)")
    parser.add_argument("--results-md", type=Path, help="the report (default: RESULTS.md; report: beside --storage's "
                        "SQLite database, so a committed study's never lands on yours)")
    parser.add_argument("--workdir", type=Path, default=Path("runs"), help="server logs, configs, suite runs")
    parser.add_argument("--port", type=int, default=0, help="pin the servers' port (default 0: a free port per launch)")
    parser.add_argument("--pin", action="append", default=[], metavar="KNOB=VALUE",
                        help="hold a knob fixed (JSON value), e.g. --pin cache_tokens=32768")
    parser.add_argument("--suite-limit", type=int, help="tasks per taskset (shrink a suite)")
    parser.add_argument("--suite-max-tokens", type=int, help="max output tokens per call in every taskset")
    parser.add_argument("--suite-tasksets", help="run only these tasksets of the suite, comma-separated")
    parser.add_argument("--suite-concurrency", type=int, help="task requests in flight (default: the suite's)")
    parser.add_argument("--suite-runtime", choices=("docker", "subprocess"),
                        help="where the suite's harness runs (default: the suite's; docker for the Prime suites, "
                        "whose tasksets declare network policies only a container enforces; subprocess runs on "
                        "this host, for tasksets that declare none, e.g. the CPU stand-ins)")
    add_task_policy_arguments(parser)
    add_rate_arguments(parser)
    parser.add_argument("--bench-prefill", help="prefill ladder, token counts, e.g. 8192 (default: 8192 on GPU)")
    parser.add_argument("--bench-decode", help="decode contexts, e.g. 1024,8192 (default on GPU)")
    parser.add_argument("--bench-workload", default=None, metavar="suite|corpus|FILE",
                        help="what decode is measured on: the suite's own tasks, one decode point per taskset, "
                        "weighted as the suite weights them (default when a suite runs); bench's math corpus "
                        "(default with --suite none); or a bench workload JSON file")
    parser.add_argument("--bench-decode-tokens", type=int, help="tokens per decode run (default 128 on GPU)")
    parser.add_argument("--bench-decode-until", choices=("length", "eos"),
                        help="eos (default; a resumed study keeps its own): the model's own answers, up to "
                        "--bench-decode-tokens; length: every run exactly that many, past the answer (text there "
                        "flatters drafting)")
    parser.add_argument("--bench-max-repeats", type=int, help="measured runs per point at most (default 6 on GPU)")
    parser.add_argument("--min-floor-top1-disagreement", type=float,
                        help="gate: the top-1 disagreement floor assumed when the measured one is smaller "
                        "(default 0.002; limit = 3 x max(floor, this))")
    parser.add_argument("--min-floor-kl-mean", type=float, help="gate: the KL-mean floor, nats (default 1e-4)")
    parser.add_argument("--min-floor-kl-p99", type=float, help="gate: the KL 99th-percentile floor, nats (default 1e-3)")
    parser.add_argument("--finalists", type=int, default=2)
    parser.add_argument("--rank-by", choices=("time", "energy"), default="time",
                        help="what ranks best so far, the finalists and the champion: request time on the workload "
                             "(default), or energy per request under the GPU's own power limit (never changed; --minimize, "
                             "which keeps request time, is then off)")
    parser.add_argument("--finalist-launches", type=int, default=2)
    parser.add_argument("--minimize", action=argparse.BooleanOptionalAction, default=None,
                        help="after the champion is confirmed, remove its changes one at a time (cheapest first) "
                        "while it stays as fast on request time; export writes that minimal champion "
                        "(default: on with --model, off for the embedded default)")
    parser.add_argument("--minimize-launches", type=int, default=2,
                        help="fresh launches of each configuration per minimization round (default 2); with n "
                        "changes it makes at most L x (5n + 1) launches")
    parser.add_argument("--minimize-max-launches", type=int, help="stop the minimization after this many launches")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--heartbeat", type=int, default=10,
                        help="shared studies: seconds between a worker's heartbeats, for its trial and its claim "
                        "to confirm the finalists (default 10)")
    parser.add_argument("--grace", type=int, default=60,
                        help="shared studies: seconds without a heartbeat after which another worker, on any host, "
                        "retries the trial or takes over the claim (default 60; well above the hosts' clock skew)")
    parser.add_argument("--drift-every-trials", type=int, default=5, metavar="K",
                        help="re-measure the baseline in a fresh launch after every K trials (0: not by count)")
    parser.add_argument("--drift-every-minutes", type=float, default=30.0, metavar="T",
                        help="... and after every T minutes (0: not by time); README: what the drift check costs")
    parser.add_argument("--no-drift-check", action="store_true",
                        help="never re-measure the baseline; prune on raw speeds against its first reading")
    parser.add_argument("--out", type=Path, help="export: where to write it (default: champion.json for --format serving, "
                        "the folder tabbyapi-export for --format tabbyapi; git ignores both)")
    parser.add_argument("--format", choices=("serving", "tabbyapi"), default="serving",
                        help="export: this project's serving config (default), or TabbyAPI's config.yml + exl3.env, "
                        "with the settings TabbyAPI cannot express and their measured cost in NOT-EXPRESSED.md")
    parser.add_argument("--full-champion", action="store_true",
                        help="export the confirmed champion even when a minimal champion passed the gate")
    parser.add_argument("-v", "--verbose", action="store_true")
    return parser


def make_plan(args: argparse.Namespace):
    from autoresearch.ground.model_source import model_of_study, resolve_model
    from autoresearch.ground.plan import RunPlan, default_probe_config, study_name_for
    from autoresearch.ground.stored_study import stored_decode_until, stored_study
    from autoresearch.night_plan import stated_from_args
    from search_space import gpu_memory_bytes, parse_bytes
    from serving.config import engine_for_checkpoint

    _check_flags(args)  # before the model is hashed and the workload built (seconds to minutes)
    cache_dir = Path(os.environ.get("AUTORESEARCH_CACHE", Path.home() / ".cache" / "exl3-autoresearch"))
    stored = stored_study(args.storage, args.study) if args.command != "run" and args.study else None
    if stored is not None:  # report/export of a stored study: what it was made with, no weights needed
        model = model_of_study(stored, locks_dir=Path("locks"))
        engine, suite = args.engine or stored["engine"], args.suite or stored["suite"]
    else:
        model = resolve_model(args.model, locks_dir=Path("locks"), cache_dir=cache_dir)
        engine = args.engine or engine_for_checkpoint(model.path)  # the engine `python -m search_space` picks
        suite = args.suite or ("offline" if model.is_embedded else "broad")
    if model.is_embedded and engine != "transformers":
        raise PlanError("the embedded default model runs on the transformers (CPU) engine")
    trials = args.trials
    if trials is None and args.hours is None:
        # report and export run no trials; the plan still wants a stopping rule
        trials = 6 if model.is_embedded or args.command != "run" else None
        if trials is None:
            raise PlanError("give --trials N or --hours H")
    vram = None
    if engine == "exllamav3":
        vram = parse_bytes(args.vram) if args.vram else gpu_memory_bytes()
        if vram is None and args.command == "run":
            raise PlanError("no GPU found to read the VRAM budget from; pass --vram (e.g. 24GiB)")
    elif args.vram:
        raise PlanError("--vram applies to the exllamav3 engine only")
    pinned = _assignments(args.pin, "--pin")
    enqueued = tuple(_assignments(item.split(","), "--enqueue") for item in args.enqueue)
    baseline_changes = _assignments(args.baseline.split(","), "--baseline") if args.baseline else {}
    overrides = _suite_overrides(args, embedded=model.is_embedded, suite=suite)
    # The embedded default's random model answers nothing right: its task tier is a smoke check, and says so.
    # broad's 3-10 tasks per taskset cannot show that nothing was lost: its tier is a guard, and says what it sees.
    gate_policy = _gate_policy(args, mode="guard" if suite == "broad" else "smoke" if model.is_embedded else "judge")
    if suite != "none" and args.command == "run":
        _check_task_power(suite, overrides, gate_policy.tasks)
        _check_suite_can_run(suite, overrides)
    workload = _workload(args, suite, overrides) if args.command == "run" else None
    draft_model = None
    if args.draft_model:
        if engine != "exllamav3":
            raise PlanError("--draft-model applies to the exllamav3 engine only")
        draft_model = resolve_model(args.draft_model, locks_dir=Path("locks"), cache_dir=cache_dir)
    study_name = args.study or study_name_for(suite, engine, model.manifest_hash)
    resumed = stored_study(args.storage, study_name) if args.command == "run" else stored
    return RunPlan(
        draft_model=draft_model,
        gate_policy=gate_policy,
        model=model, engine=engine, suite=suite, study_name=study_name,
        storage_url=args.storage, workdir=args.workdir.resolve(), results_md=(args.results_md or Path("RESULTS.md")).resolve(), trials=trials, hours=args.hours,
        vram_bytes=vram, emulate_vram=args.emulate_vram,
        host_memory_limit_bytes=parse_bytes(args.host_memory_limit) if args.host_memory_limit else None, port=args.port, seed=args.seed,
        bench_plan=_bench_plan(engine, args, workload, stored_decode_until(resumed)), workload=workload, probe_config=default_probe_config(engine), suite_overrides=overrides,
        pinned=pinned, enqueued=enqueued, levers=not args.no_levers, baseline_changes=baseline_changes, finalists=args.finalists, finalist_launches=args.finalist_launches,
        heartbeat_s=args.heartbeat, grace_s=args.grace, drift=_drift_policy(args),
        minimize=not model.is_embedded and args.rank_by == "time" if args.minimize is None else args.minimize,
        minimize_launches=args.minimize_launches, minimize_max_launches=args.minimize_max_launches,
        task_tier_scope=args.task_tier_scope, stated_rates=stated_from_args(args), rank_by=args.rank_by,
        startup_timeout_s=300.0 if engine == "transformers" else 900.0,
    )


def _drift_policy(args: argparse.Namespace):
    from autoresearch.ground.plan import DriftPolicy

    if args.no_drift_check:
        return DriftPolicy(every_trials=None, every_minutes=None)
    if args.drift_every_trials < 0 or args.drift_every_minutes < 0:
        raise PlanError("--drift-every-trials and --drift-every-minutes must be >= 0 (0 turns that rule off)")
    return DriftPolicy(every_trials=args.drift_every_trials or None, every_minutes=args.drift_every_minutes or None)


def _check_flags(args: argparse.Namespace) -> None:
    """The usage mistakes that need neither the model nor the suite's data: refused at once."""
    from eval.suites import SUITES
    from search_space import parse_bytes
    from search_space.errors import BudgetError

    for flag, value, ok in (("--trials", args.trials, lambda v: v >= 1), ("--hours", args.hours, lambda v: v > 0),
                            ("--port", args.port, lambda v: 0 <= v <= 65535)):
        if value is not None and not ok(value):
            raise PlanError(f"{flag} {value}: " + ("a TCP port is 1-65535 (default 0: a free one per launch)"
                                                   if flag == "--port" else "must be > 0"))
    if args.suite is not None and args.suite not in (*SUITES, "none"):
        raise PlanError(f"unknown suite {args.suite!r}; suites: {', '.join((*SUITES, 'none'))}")
    for flag, value in (("--vram", args.vram), ("--host-memory-limit", args.host_memory_limit)):
        try:
            _ = value and parse_bytes(value)
        except BudgetError as exc:
            raise PlanError(f"{flag} {value!r}: {exc}") from exc
    _assignments(args.pin, "--pin")
    for item in (*args.enqueue, *([args.baseline] if args.baseline else [])):
        _assignments(item.split(","), "--enqueue" if item in args.enqueue else "--baseline")
    for flag in ("bench_prefill", "bench_decode"):
        _token_counts(args, flag)


def _suite_overrides(args: argparse.Namespace, *, embedded: bool, suite: str = "offline") -> dict:
    """The suite changes the flags ask for; the embedded default's tiny model gets short answers, and the
    offline suite's 600 tasks per taskset shrink to 2 (broad keeps its own sizes: the guard's power is theirs)."""
    overrides: dict = {}
    for flag, key in (("suite_limit", "limit"), ("suite_max_tokens", "max_tokens"),
                      ("suite_concurrency", "max_concurrent")):
        if getattr(args, flag) is not None:
            overrides[key] = getattr(args, flag)
    if args.suite_runtime:
        overrides["runtime"] = args.suite_runtime
    if args.suite_tasksets:
        overrides["tasksets"] = tuple(name.strip() for name in args.suite_tasksets.split(",") if name.strip())
    if embedded:
        if suite != "broad":
            overrides.setdefault("limit", 2)
        overrides.setdefault("max_tokens", 48)
    return overrides


def _gate_policy(args: argparse.Namespace, *, mode: str):
    import dataclasses

    from eval import GatePolicy
    from eval.errors import EvalConfigError

    policy = GatePolicy()
    changes = {name: getattr(args, name) for name in ("min_floor_top1_disagreement", "min_floor_kl_mean",
                                                             "min_floor_kl_p99")
               if getattr(args, name) is not None}
    try:
        return GatePolicy(fidelity=dataclasses.replace(policy.fidelity, **changes),
                          tasks=task_policy_from_args(args, mode=mode))
    except EvalConfigError as exc:
        raise PlanError(str(exc)) from exc


def _suite_spec(suite_name: str, overrides: dict):
    """The suite as this run will run it (the flags' overrides applied)."""
    from eval.errors import EvalConfigError
    from eval.suites import SuiteOverrides, apply_overrides, get_suite

    try:
        return apply_overrides(get_suite(suite_name), SuiteOverrides(**overrides))
    except EvalConfigError as exc:
        raise PlanError(str(exc)) from exc


def _check_task_power(suite_name: str, overrides: dict, policy) -> None:
    """Refuse, before anything launches, a judged suite whose tasksets are too small for the claimed power.

    Tasksets whose size is known only after a run are checked on the baseline's run instead.
    """
    from eval.decision import underpowered

    if not policy.judge:
        return
    suite = _suite_spec(suite_name, overrides)
    design = policy.design(len(suite.tasksets))
    problems = [problem for spec in suite.tasksets if spec.planned_tasks is not None
                and (problem := underpowered(spec.name, spec.planned_tasks, policy, design))]
    if problems:
        raise PlanError("the task tier cannot make the claim it is asked to: " + "; ".join(problems))


def _check_suite_can_run(suite_name: str, overrides: dict) -> None:
    """Refuse, before the baseline launches, a suite that cannot run here: one line per missing piece and its fix.

    The pinned tasksets installed, their data present and verified, Docker answering and its image built.
    """
    from eval.errors import DataIntegrityError
    from eval.paths import EvalPaths
    from eval.preflight import missing_pieces

    suite = _suite_spec(suite_name, overrides)
    try:
        missing = missing_pieces(suite, paths=EvalPaths.default())
    except DataIntegrityError as exc:
        raise PlanError(str(exc)) from exc
    if missing:
        raise PlanError(f"suite {suite.name} cannot run here; nothing was launched:\n"
                        + "\n".join(m.line for m in missing))


def _workload(args: argparse.Namespace, suite_name: str, overrides: dict):
    """The bench workload decode is measured on (None: bench's corpus), as --bench-workload chooses."""
    from bench import BenchConfigError, Workload
    from eval.errors import EvalConfigError

    choice = args.bench_workload or ("corpus" if suite_name == "none" else "suite")
    if choice == "corpus":
        return None
    try:
        if choice == "suite":
            if suite_name == "none":
                raise PlanError("--bench-workload suite needs a suite; with --suite none use corpus or a FILE")
            from autoresearch.ground.workload import suite_workload

            return suite_workload(_suite_spec(suite_name, overrides))
        return Workload.load(Path(choice))
    except (BenchConfigError, EvalConfigError) as exc:
        raise PlanError(f"--bench-workload {choice}: {exc}") from exc


def _bench_plan(engine: str, args: argparse.Namespace, workload=None, stored_decode_until: str | None = None):
    from autoresearch.ground.plan import bench_plan_from_flags

    return bench_plan_from_flags(
        engine, workload, stored_decode_until=stored_decode_until, prefill_tokens=_token_counts(args, "bench_prefill"),
        decode_context_tokens=_token_counts(args, "bench_decode"), decode_tokens=args.bench_decode_tokens,
        decode_until=args.bench_decode_until, max_repeats=args.bench_max_repeats)


def _token_counts(args: argparse.Namespace, flag: str) -> tuple[int, ...] | None:
    value = getattr(args, flag)
    try:
        return None if value is None else tuple(int(x) for x in value.split(",") if x.strip())
    except ValueError as exc:
        raise PlanError(f"--{flag.replace('_', '-')} {value!r}: write token counts like 1024,8192") from exc


def _assignments(items, flag: str) -> dict:
    """KNOB=VALUE items; VALUE is JSON where it parses (4096, true, "x"), else a string."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise PlanError(f"{flag} {item!r}: write KNOB=VALUE")
        try:
            out[name] = json.loads(value)
        except json.JSONDecodeError:
            out[name] = value
    return out


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["sweep"]:
        from autoresearch.trial import sweep

        sweep_args = sweep.build_parser().parse_args(argv[1:])
        setup_logging(sweep_args.verbose)
        return sweep.command(sweep_args)
    if argv[:1] == ["workload"]:
        from autoresearch.ground import workload

        workload_args = workload.build_parser().parse_args(argv[1:])
        setup_logging(workload_args.verbose)
        return workload.command(workload_args)
    args = build_parser().parse_args(argv)
    if args.command == "sweep":
        print("error: write `sweep` first: python -m autoresearch sweep --help", file=sys.stderr)
        return 2
    setup_logging(args.verbose)
    try:
        return _command(args)
    except StorageError as exc:
        print(f"StorageError: {exc}", file=sys.stderr)
        return 2


def _command(args: argparse.Namespace) -> int:
    import sqlalchemy

    from results import readable_storage

    shown = args.storage
    try:
        with contextlib.ExitStack() as stack:
            stated_plan = args.command == "plan" and not args.study  # rates stated: no database needed
            if args.command != "run" and not stated_plan:  # reports and exports only read: a snapshot
                try:
                    args.storage = stack.enter_context(readable_storage(args.storage))
                except FileNotFoundError as exc:  # only this: a missing file elsewhere is no missing database
                    raise StorageError(f"no database at {shown}: run the loop first, or pass --storage") from exc
            return _run_command(args, shown)
    except sqlalchemy.exc.DatabaseError as exc:  # corrupt, not a database, locked, unreachable server
        raise StorageError(f"cannot use {shown}: {exc.orig if exc.orig is not None else exc}".splitlines()[0]) \
            from exc


def _plan_command(args: argparse.Namespace) -> int:
    """The night plan from a stored study or stated rates: no model, no GPU needed."""
    from autoresearch.ground.stored_study import stored_study
    from autoresearch.night_plan import plan_command

    stored = stored_study(args.storage, args.study) if args.study else None
    suite = args.suite or (stored or {}).get("suite") or "offline"
    if suite == "none":
        raise PlanError("plan: --suite none has no task tier to plan")
    policy = _gate_policy(args, mode="guard" if suite == "broad" else "judge").tasks
    try:
        return plan_command(args, _suite_spec(suite, _suite_overrides(args, embedded=False, suite=suite)), policy)
    except ValueError as exc:
        raise PlanError(str(exc)) from exc


def _run_command(args: argparse.Namespace, shown_storage: str) -> int:
    try:
        if args.command == "plan":
            return _plan_command(args)
        if args.command in ("export", "report"):
            from autoresearch.ground.outputs import settle_reading_command

            settle_reading_command(args, shown_storage)
        plan = make_plan(args)
        if shown_storage != args.storage:
            import dataclasses

            plan = dataclasses.replace(plan, storage_shown=shown_storage)
        if args.command == "export":
            from autoresearch.champion.export import export_champion

            return export_champion(plan, args.out, fmt=args.format, full=args.full_champion)
        if args.command == "report":
            from autoresearch.report.results_md import regenerate_report

            return regenerate_report(plan)
        from autoresearch.loop import run

        return run(plan)
    except PlanError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except TunerError as exc:  # every package's deliberate errors: a clear line, not a traceback
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: the study is saved; the same command continues it (the trial in flight runs again)",
              file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
