"""The night plan where the loop and the CLI meet it: rates from flags or from a stored study, printed
and kept in the study (RESULTS.md shows the latest), and `python -m autoresearch plan`.

The arithmetic is autoresearch.night.forecast's; this module only finds its inputs and says the result.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
from collections.abc import Sequence

import optuna

from autoresearch.checks.task_tier import first_answers
from autoresearch.ground.db import ResultsDB
from autoresearch.ground.plan import RunPlan
from autoresearch.ground.study import baseline_trial, is_baseline
from autoresearch.night.clock import least_minimization, tabbyapi_subset_launches, versus_baseline_launches
from autoresearch.night.forecast import SCOPES, Forecast, plan_night
from autoresearch.night.rates import (
    PROJECT_SHAPE,
    Rates,
    ShapeGain,
    assumed_gain,
    measured_rates,
    stated_rates,
)
from eval.decision import TaskPolicy
from eval.store import EvalStore
from eval.suites import SuiteSpec

__all__ = ["ASSUMED_CHANGES", "PLAN_KEY", "add_rate_arguments", "announce", "assumed_rates", "bench_rates", "forecast_for",
           "minimize_launches", "night_forecast", "plan_command", "rates_at", "rates_from_args", "stated_from_args",
           "study_rates", "task_judgments"]

log = logging.getLogger(__name__)
PLAN_KEY = "night_plan"
ASSUMED_CHANGES = 3  # the champion's changes the minimization is planned for until a candidate has some
_RATE_FLAGS = {  # flag -> (stated_rates argument, help)
    "--decode-tok-s": ("decode_tok_s", "plan: batch-1 decode tok/s of the model on the target GPU"),
    "--prefill-tok-s": ("prefill_tok_s", "plan: prefill tok/s at the suite's prompt lengths"),
    "--answer-tokens": ("answer_tokens", "plan: the model's mean answer length in tokens (thinking included)"),
    "--prompt-tokens": ("prompt_tokens", "plan: mean prompt length of the suite's tasks (default 300)"),
    "--batch-gain": ("batch_gain", "plan: aggregate decode at the suite's concurrency over batch-1 (default: this "
                     "project's measurement on the model's shape, the 27B's 4.1 at 8 in flight; 1 for a shape never "
                     "measured)"),
    "--launch-s": ("launch_s", "plan: seconds to launch a server (default 120)"),
    "--bench-s": ("bench_s", "plan: seconds of one bench run (default 180)"),
    "--fidelity-s": ("fidelity_s", "plan: seconds of one fidelity measurement (default 120)"),
}


def add_rate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task-tier-scope", choices=SCOPES, default="finalists",
                        help="who the task tier judges: finalists (default: the fidelity-passing configurations "
                        "the finalists' stage confirms, before one is crowned) or every (each candidate that "
                        "passes fidelity, inside its trial)")
    for flag, (_, text) in _RATE_FLAGS.items():
        parser.add_argument(flag, type=float, help=text)


def stated_from_args(args: argparse.Namespace) -> dict:
    """The rate flags given, as stated_rates' arguments."""
    return {key: value for flag, (key, _) in _RATE_FLAGS.items()
            if (value := getattr(args, flag[2:].replace("-", "_"), None)) is not None}


def assumed_rates(suite: SuiteSpec | None, engine: str, stated: dict, *, shape: ShapeGain | None = None,
                  bench: dict | None = None) -> Rates:
    """The rates stated, with decode and prefill the baseline's bench measured where not stated (`bench`), and what
    is still missing assumed (and said to be) until the baseline's answers measure it; the batching gain, where not
    stated, this project's measurement on the model's `shape` (autoresearch.night.rates.assumed_gain). Without a
    suite (--suite none), the cheap stages' only."""
    cpu = engine == "transformers"
    defaults = ({"decode_tok_s": 10.0, "prefill_tok_s": 200.0, "answer_tokens": 32.0, "prompt_tokens": 150.0,
                 "launch_s": 15.0, "bench_s": 40.0, "fidelity_s": 15.0} if cpu else
                {"decode_tok_s": 40.0, "prefill_tok_s": 1000.0, "answer_tokens": 1000.0})
    measured = {k: v for k, v in (bench or {}).items() if k not in stated and v}
    given = stated | measured
    missing = [k for k in ("decode_tok_s", "prefill_tok_s", "answer_tokens") if k not in given]
    source = "stated rates" if not missing else f"assumed rates ({', '.join(missing)} not stated or measured yet)"
    if measured:
        source += f"; {' and '.join(k.removesuffix('_tok_s') for k in measured)} from the baseline's bench"
    if suite is None:
        rates = defaults | given
        return Rates(launch_s=rates.get("launch_s", 120.0), bench_s=rates.get("bench_s", 180.0),
                     fidelity_s=rates.get("fidelity_s", 120.0), tasksets=(), source=source)
    gain, basis = (given["batch_gain"], "stated") if "batch_gain" in given else \
        (1.0, "") if cpu else assumed_gain(shape, suite.max_concurrent)
    return stated_rates(suite, **(defaults | given | {"batch_gain": gain}), source=source, gain_basis=basis)


def bench_rates(study: optuna.Study) -> dict:
    """The baseline's first bench, as the plan's decode and prefill rates until its answers are measured: set while
    its trial runs, so the ETA of its own first answers comes from it."""
    for t in study.get_trials(deepcopy=False):
        if is_baseline(t) and t.user_attrs.get("decode_tok_per_s"):
            return {"decode_tok_s": t.user_attrs["decode_tok_per_s"], "prefill_tok_s": t.user_attrs.get("prefill_tok_per_s")}
    return {}


def rates_from_args(args: argparse.Namespace, suite: SuiteSpec) -> Rates:
    """Stated rates for `plan` without a stored study: decode and prefill tok/s must be given."""
    stated = stated_from_args(args)
    if "decode_tok_s" not in stated or "prefill_tok_s" not in stated:
        raise ValueError("state the machine's rates (--decode-tok-s and --prefill-tok-s, and --answer-tokens), "
                         "or name a stored study (--study, --storage)")
    return assumed_rates(suite, "exllamav3", stated, shape=PROJECT_SHAPE)


def study_rates(study: optuna.Study, db: ResultsDB, suite: SuiteSpec | None, fallback: Rates) -> Rates:
    """The rates this study has measured so far (rates_at, on all of it)."""
    trials = study.get_trials(deepcopy=False)
    baseline = getattr(baseline_trial(trials), "number", None)
    runs = [r["payload"] for r in db.measurements(study=study.study_name, kind="suite", trial=baseline)] \
        if baseline is not None else []
    return rates_at(trials, runs, task_judgments(study, db, baseline, runs), suite, fallback)


def rates_at(trials: Sequence, runs: list[dict], judgments: list[dict], suite: SuiteSpec, fallback: Rates) -> Rates:
    """The rates measured by `trials`, the baseline's suite `runs` and the task tier's `judgments` (task_judgments,
    in order): every trial's stage times, the answering calls of the baseline and of the judgments that did not
    make it answer on (a call's start and its answers, alike on both sides), the walks of the judged candidates
    and how far the baseline has answered. A study's state at any point is a prefix of its records."""
    rates = measured_rates(trials, runs + [j["payload"] for j in judgments if not j["extended"]], suite,
                           fallback=fallback)
    answered = judgments[-1]["answered"] if judgments else _answered(runs)
    walks: dict[str, list[int]] = {}
    for j in judgments:
        for name, used in j["walks"].items():
            walks.setdefault(name, []).append(int(used))
    source = rates.source + (f"; walks of {len(judgments)} judged candidate(s)" if judgments else "")
    return dataclasses.replace(rates, source=source, tasksets=tuple(
        dataclasses.replace(t, walks=tuple(walks.get(t.name, ())), answered=answered.get(t.name, 0))
        for t in rates.tasksets))


def _answered(runs: list[dict]) -> dict[str, int]:
    """Tasks per taskset in the baseline's own suite runs."""
    return {t["name"]: t["tasks"] for run in runs for t in run.get("tasksets") or []}


def task_judgments(study: optuna.Study, db: ResultsDB, baseline: int | None, baseline_runs: list[dict]) -> list[dict]:
    """The task tier's judgments in order: each one's suite record ("payload"), its walks (stored with it, or
    for records stored before walks were, in its gate decision's evidence), how far the baseline had answered
    after it ("answered"), and whether it made the baseline answer on ("extended": its elapsed time then
    holds a relaunch and the baseline's calls)."""
    answered = _answered(baseline_runs)
    decisions, out = None, []
    for record in db.measurements(study=study.study_name, kind="suite"):
        payload = record["payload"]
        if record["trial"] == baseline or not payload.get("lazy"):
            continue
        walks = payload.get("walks")
        if walks is None:
            if decisions is None:
                decisions = {row["candidate_suite_run_id"]: row for row in EvalStore(db.url).decision_rows()}
            evidence = (decisions.get(payload.get("suite_run_id")) or {}).get("evidence") or {}
            walks = {v["name"]: v["tasks_used"] for v in evidence.get("tasksets") or []}
        now = payload.get("baseline_answered") or {}
        extended = not answered or now != answered
        answered = {**answered, **now}
        out.append({"payload": payload, "walks": walks, "answered": answered, "extended": extended})
    return out


def announce(study: optuna.Study | None, forecast: Forecast, when: str) -> None:
    """Print the plan and keep it in the study (RESULTS.md shows the latest)."""
    text = f"{when}:\n{forecast.text()}"
    print(text, end="", flush=True)
    if study is not None:
        study.set_user_attr(PLAN_KEY, {"when": when, "text": forecast.text(), "fits": forecast.fits,
                                       "stage_s": forecast.stage_s(), "total_s": forecast.total_s})


def night_forecast(plan: RunPlan, study: optuna.Study, db: ResultsDB, suite: SuiteSpec | None, *, measured: bool,
                   report_s: float = 0.0, shape: ShapeGain | None = None) -> Forecast:
    """The loop's plan for its night (not printed: `announce` prints it), from the stated (or assumed) rates, the
    baseline's bench once it ran, and, once `measured`, the study's own; re-made after every trial for the loop's
    reserve (autoresearch.night.clock). `shape`: the model's, for the batching gain until it is measured."""
    rates = assumed_rates(suite, plan.engine, plan.stated_rates, shape=shape, bench=bench_rates(study))
    if measured:
        rates = study_rates(study, db, suite, rates)
    policy = plan.gate_policy.tasks
    tabbyapi = plan.engine == "exllamav3"
    least, launches = minimize_launches(plan.minimize_launches, plan.minimize_max_launches, _champion_changes(study),
                                        tabbyapi=tabbyapi) if plan.minimize else (0.0, 0.0)
    return forecast_for(rates, policy=policy, hours=plan.hours, trials=plan.trials,
                        finalists=plan.finalists, finalist_launches=plan.finalist_launches,
                        scope=plan.task_tier_scope, judging=policy.mode == "judge",
                        baseline_first=first_answers(policy, suite) if suite is not None else 0,
                        minimize_launches=launches, minimize_least=least, tabbyapi=tabbyapi, report_s=report_s)


def minimize_launches(per_config: int, max_launches: int | None, changes: int, *,
                      tabbyapi: bool) -> tuple[float, float]:
    """The minimization's launches for a champion of `changes` changes: (least, full). Full: its ranking round and
    each change tried once (per_config x (3 changes + 1); autoresearch.champion.minimize's bound allows 5 changes
    + 1) and the minimal champion's round against the baseline. Least: its ranking round, one attempt and that round (autoresearch.night.clock.least_minimization: the least that
    minimizes anything, the clock's cut rule; the night plan's policy keeps the minimization only where this and
    its gates fit in its share of the night). Each at most --minimize-max-launches, and with the exllamav3 engine
    the TabbyAPI subsets' (3 x per_config)."""
    extra = tabbyapi_subset_launches(per_config) if tabbyapi else 0
    full = per_config * (3 * changes + 1) + versus_baseline_launches(per_config)
    least = least_minimization(per_config, changes)
    if max_launches is not None:
        full, least = min(full, max_launches), min(least, max_launches)
    return float(min(least, full) + extra), float(full + extra)


def _champion_changes(study: optuna.Study) -> int:
    """The changes of the best candidate so far (what the minimization will remove), else ASSUMED_CHANGES."""
    from autoresearch.champion.changes import changes_of
    from autoresearch.crown.finalists import select_finalists
    from autoresearch.measures.ranking import Ranking
    from serving.config import ServingConfig

    baseline = baseline_trial(study)
    best = select_finalists(study, Ranking.of(study), baseline, 1) if baseline is not None else []
    if not best:  # no baseline, or no candidate on the front faster than it
        return ASSUMED_CHANGES
    return len(changes_of(ServingConfig.from_dict(best[0].user_attrs["config"]),
                          ServingConfig.from_dict(baseline.user_attrs["config"])))


def forecast_for(rates: Rates, *, policy: TaskPolicy, hours: float | None, trials: int | None, finalists: int,
                 finalist_launches: int, scope: str, judging: bool, baseline_first: int = 0,
                 minimize_launches: float = 0.0, minimize_least: float | None = None, tabbyapi: bool = False,
                 report_s: float = 0.0) -> Forecast:
    """The plan for a run stopped by --hours; a run stopped by --trials only is planned for the hours its
    trials would take, every stage after them whole."""
    kw = {"finalists": finalists, "finalist_launches": finalist_launches, "scope": scope, "judging": judging,
          "baseline_first": baseline_first, "minimize_launches": minimize_launches,
          "minimize_least": minimize_least, "tabbyapi": tabbyapi, "report_s": report_s}
    if hours is not None:
        return plan_night(rates, policy=policy, hours=hours, **kw)
    bound = f"--trials {trials or 1}"
    per = rates.launch_s + rates.bench_s + rates.fidelity_s
    hours = max((trials or 1) * per / 3600.0, 0.01)
    probe = plan_night(rates, policy=policy, hours=hours, suggest=False, bound=bound, **kw)
    after = sum(probe.after_search().values())
    hours = max(hours, (probe.baseline_s + after + (trials or 1) * probe.trial_s
                        + 1.0) / 3600.0)  # a second over: the plan's floor division must reach the last trial
    return plan_night(rates, policy=policy, hours=hours, bound=bound, **kw)


def plan_command(args: argparse.Namespace, suite: SuiteSpec, policy: TaskPolicy) -> int:
    """`python -m autoresearch plan`: the night plan without running, from a stored study or stated rates."""
    if args.hours is None:
        raise ValueError("plan: give --hours H, the night to plan")
    rates = None
    if args.study:
        try:
            study = optuna.load_study(study_name=args.study, storage=args.storage)
        except KeyError:
            raise ValueError(f"plan: no study {args.study!r} in {args.storage}") from None
        fallback = assumed_rates(suite, study.user_attrs.get("engine", "exllamav3"), stated_from_args(args),
                                 shape=PROJECT_SHAPE, bench=bench_rates(study))
        rates = study_rates(study, ResultsDB(args.storage), suite, fallback)
    else:
        rates = rates_from_args(args, suite)
    least, launches = (0.0, 0.0) if args.minimize is False else minimize_launches(
        args.minimize_launches, args.minimize_max_launches, ASSUMED_CHANGES, tabbyapi=True)
    forecast = plan_night(rates, policy=policy, hours=args.hours, finalists=args.finalists,
                          finalist_launches=args.finalist_launches, scope=args.task_tier_scope,
                          judging=policy.mode == "judge", baseline_first=first_answers(policy, suite),
                          minimize_launches=launches, minimize_least=least, tabbyapi=True)
    print(forecast.text(), end="")
    return 0 if forecast.fits else 1
