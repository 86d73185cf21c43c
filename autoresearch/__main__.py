"""Find the fastest serving configuration that keeps the model's intelligence.

Usage:
    python -m autoresearch                                  # embedded default: tiny model, CPU, offline suite
    python -m autoresearch --suite broad --model DIR|ORG/REPO@REV [--trials N | --hours H] [--vram 24GiB]
                           [--study NAME] [--storage URL]
    python -m autoresearch export [--study NAME] [--storage URL] [--out champion.json] [--format serving|tabbyapi]
    python -m autoresearch report [--study NAME] [--storage URL]
    python -m autoresearch plan --hours H [--study NAME | --decode-tok-s R --prefill-tok-s R [--answer-tokens N]]
                           # what a night buys, without running (default: the database's only study's rates)
    python -m autoresearch sweep --model DIR --baseline B.json --candidate NAME=C.json ... --db URL
                           # fidelity only: the baseline protocol, then each candidate in a fresh launch
    python -m autoresearch workload --suite offline --out workload.json   # the suite's tasks for bench --workload
Each command's own flags: python -m autoresearch COMMAND --help (the parser: autoresearch.cli).

Exit status: 0 done, 1 the run failed (plan: the night cannot make its claim), 2 usage or storage error,
130 interrupted (Ctrl-C).
Ordinary failures are one line on stderr; tracebacks go to runs/<study>/loop.log (and the terminal with -v).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from autoresearch.cli import parse_args
from autoresearch.ground.errors import PlanError, StorageError
from autoresearch.ground.logs import setup_logging
from eval.policy_args import task_policy_from_args
from tuner_errors import TunerError

log = logging.getLogger("autoresearch")


def make_plan(args: argparse.Namespace):
    from autoresearch.ground.model_source import model_of_study, resolve_model
    from autoresearch.ground.plan import RunPlan, default_probe_config, study_name_for
    from autoresearch.ground.stored_study import stored_decode_until, stored_study
    from autoresearch.night_plan import stated_from_args
    from search_space import gpu_memory_bytes, parse_bytes
    from serving.config import engine_for_checkpoint
    from serving.synthetic.embedded import default_cache_dir

    _check_flags(args)  # before the model is hashed and the workload built (seconds to minutes)
    cache_dir = default_cache_dir()
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
        finalist_max_launches=args.finalist_max_launches or (3 if model.is_embedded else 8),
        min_speedup=args.min_speedup, guard_tolerance=args.guard_tolerance,
        heartbeat_s=args.heartbeat, grace_s=args.grace, drift=_drift_policy(args),
        minimize=not model.is_embedded if args.minimize is None else args.minimize,
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
    args = parse_args(argv)
    setup_logging(args.verbose)
    try:
        return _command(args)
    except StorageError as exc:
        print(f"StorageError: {exc}", file=sys.stderr)
        return 2
    except PlanError as exc:  # refused before the database was read
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _command(args: argparse.Namespace) -> int:
    import sqlalchemy

    from results import readable_storage

    shown = args.storage
    try:
        with contextlib.ExitStack() as stack:
            stated_plan = args.command == "plan" and not args.study and _rates_stated(args)  # no database needed
            if args.command != "run" and not stated_plan:  # reports, exports and plans only read: a snapshot
                try:
                    args.storage = stack.enter_context(readable_storage(args.storage))
                except FileNotFoundError as exc:  # only this: a missing file elsewhere is no missing database
                    if args.command == "plan" and not args.study:
                        raise PlanError(f"plan: no database at {shown} to read a study's rates from: state the "
                                        "machine's rates (--decode-tok-s and --prefill-tok-s, and --answer-tokens), "
                                        "or pass --storage") from exc
                    raise StorageError(f"no database at {shown}: run the loop first, or pass --storage") from exc
            return _run_command(args, shown)
    except sqlalchemy.exc.DatabaseError as exc:  # corrupt, not a database, locked, unreachable server
        raise StorageError(f"cannot use {shown}: {exc.orig if exc.orig is not None else exc}".splitlines()[0]) \
            from exc


def _rates_stated(args: argparse.Namespace) -> bool:
    """`plan` was given the machine's decode and prefill rates: it plans from them, without a database."""
    from autoresearch.night_plan import stated_from_args

    stated = stated_from_args(args)
    return "decode_tok_s" in stated and "prefill_tok_s" in stated


def _plan_command(args: argparse.Namespace, shown_storage: str) -> int:
    """The night plan from a stored study (--study, default the database's only one) or stated rates: no model,
    no GPU needed."""
    from autoresearch.ground.stored_study import stored_concurrency, stored_study, study_to_read
    from autoresearch.night_plan import plan_command

    if args.study or not _rates_stated(args):
        args.study = study_to_read(args.storage, shown_storage, args.study)
    stored = stored_study(args.storage, args.study) if args.study else None
    suite = args.suite or (stored or {}).get("suite") or "offline"
    if suite == "none":
        raise PlanError("plan: --suite none has no task tier to plan")
    policy = _gate_policy(args, mode="guard" if suite == "broad" else "judge").tasks
    overrides = _suite_overrides(args, embedded=False, suite=suite)
    if stored_concurrency(stored) is not None:  # the study's own number, which its rates were measured at
        overrides.setdefault("max_concurrent", stored_concurrency(stored))
    try:
        return plan_command(args, _suite_spec(suite, overrides), policy)
    except ValueError as exc:
        raise PlanError(str(exc)) from exc


def _run_command(args: argparse.Namespace, shown_storage: str) -> int:
    try:
        if args.command == "plan":
            return _plan_command(args, shown_storage)
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
