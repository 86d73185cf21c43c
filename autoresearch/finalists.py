"""Before crowning a champion, re-measure the finalists in fresh launches and decide on those numbers.

The best of many noisy search measurements is biased upward (the optimizer's curse), so search
repeats do not count here: the top feasible configurations and the baseline are each launched
`finalist_launches` times, interleaved (baseline, A, B, baseline, A, B, ...), and the champion is
the finalist that bench's rule calls faster than the baseline on at least one objective point and
slower on none, ranked by the geometric mean of its two speed-ups (each the median over its
launches). A launch that left any objective point unmeasured does not count; a finalist that
cannot be compared on every point is not confirmed. If none qualifies, the baseline stays.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets
import statistics
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import optuna

from autoresearch.baseline import stored_speed_floor
from autoresearch.db import ResultsDB
from autoresearch.errors import ConfirmedElsewhere, Unmeasured
from autoresearch.objectives import objective_metrics, objectives_from_bench, speedup_score
from autoresearch.plan import RunPlan, worker_gone, worker_name
from autoresearch.servers import serve
from autoresearch.study import feasible
from bench import BenchError, BenchResult, MissingMetric, NoiseFloor, compare, noise_floor, run_bench
from openai_client import ClientError, Endpoint
from search_space import SearchSpace, config_from_params
from serving.errors import LaunchError

__all__ = ["Champion", "confirm_finalists", "feasible_front", "judge_finalist", "load_champion", "median_objectives"]

log = logging.getLogger(__name__)
_CHAMPION = "champion"


@dataclass(frozen=True)
class Champion:
    trial: int
    config: dict
    decode_tok_per_s: float
    prefill_tok_per_s: float
    speedup: float
    is_baseline: bool


def feasible_front(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """Feasible COMPLETE trials on the Pareto front (Optuna's best_trials filters by constraints)."""
    return [t for t in study.best_trials if feasible(t)]


def _pooled(results: list[BenchResult]) -> dict[str, tuple[float, ...]]:
    pooled: dict[str, list[float]] = {}
    for result in results:
        for metric, values in result.samples().items():
            pooled.setdefault(metric, []).extend(values)
    return {k: tuple(v) for k, v in pooled.items()}


def confirm_finalists(plan: RunPlan, study: optuna.Study, space: SearchSpace, db: ResultsDB,
                      judge_tasks: Callable[[optuna.trial.FrozenTrial], dict] | None = None) -> Champion | None:
    """Re-measure, decide, store the decision in ar_finalists and the study; None without a baseline.

    `judge_tasks(trial)` runs the task tier on a finalist whose tier is pending (--task-tier-scope
    finalists; autoresearch.judging): the finalists confirmed faster are judged fastest first until one
    passes, and only a finalist that passed is crowned.

    Raises:
        ConfirmedElsewhere: another worker of the study confirms these same finished trials.
    """
    trials = _after_running_trials(plan, study)
    stored = load_champion(study)
    if stored is not None and stored.get("trials_at") == len(trials):  # decided, and nothing ran since
        return Champion(**{k: stored[k] for k in Champion.__dataclass_fields__})
    baseline = next((t for t in trials if t.user_attrs.get("role") == "baseline"
                     and t.state == optuna.trial.TrialState.COMPLETE), None)
    if baseline is None:
        return None
    baseline_values = tuple(baseline.values)
    front = [t for t in feasible_front(study) if t.user_attrs.get("role") != "baseline"]
    front.sort(key=lambda t: speedup_score(tuple(t.values), baseline_values), reverse=True)
    finalists = [t for t in front if speedup_score(tuple(t.values), baseline_values) > 1.0][: plan.finalists]
    if not finalists:
        champion = Champion(trial=baseline.number, config=baseline.user_attrs["config"],
                            decode_tok_per_s=baseline_values[0], prefill_tok_per_s=baseline_values[1],
                            speedup=1.0, is_baseline=True)
        study.set_user_attr(_CHAMPION, champion.__dict__ | {"reason": "no feasible candidate was faster in search",
                                                            "trials_at": len(trials)})
        return champion

    finished = sum(t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED) for t in trials)
    claim = {"study": plan.study_name, "what": "confirm finalists", "key": f"after {finished} finished trials",
             "worker": worker_name()}
    holder = db.claim(**claim, grace_s=plan.grace_s, holder_gone=worker_gone)
    if holder is not None:  # several workers end together: one confirms, on its own GPU
        raise ConfirmedElsewhere(f"worker {holder} confirms the finalists of these {finished} trials; its "
                                 "RESULTS.md names the champion")
    with db.holding(**claim, interval_s=plan.heartbeat_s) as lost:
        return _confirm(plan, study, space, db, baseline, finalists, trials, lost, judge_tasks)


def _confirm(plan: RunPlan, study: optuna.Study, space: SearchSpace, db: ResultsDB, baseline: optuna.trial.FrozenTrial,
             finalists: list[optuna.trial.FrozenTrial], trials: list[optuna.trial.FrozenTrial],
             lost: threading.Event, judge_tasks: Callable[[optuna.trial.FrozenTrial], dict] | None = None,
             ) -> Champion | None:
    """The claimed round: fresh launches of the baseline and the finalists, interleaved, then the decision.

    Raises:
        ConfirmedElsewhere: the claim was taken over while the launches ran (this worker's heartbeat
            stalled past the grace period); the other worker's round decides, not this one.
    """
    # a round cut short (the confirming worker killed) left launches but no decision: the next is a new round
    launched = (r["payload"]["round"] for r in db.measurements(study=plan.study_name, kind="finalist_bench"))
    round_ = 1 + max((*(r["round"] for r in db.finalists(study=plan.study_name)), *launched), default=0)
    order = [baseline, *finalists]
    results: dict[int, list[BenchResult]] = {t.number: [] for t in order}
    for launch in range(plan.finalist_launches):
        for t in order:  # interleaved, so drift hits every configuration alike
            result = _launch_and_bench(plan, space, t, round_, launch, db)
            if result is not None:
                results[t.number].append(result)

    if lost.is_set():
        raise ConfirmedElsewhere(f"the claim to confirm round {round_} was taken over while it ran (no heartbeat "
                                 f"for over {plan.grace_s} s); the worker that took it decides")
    base_runs = results[baseline.number]
    if not base_runs:
        log.error("the baseline could not be measured in any confirmation launch; no champion decided")
        db.add_finalist(study=plan.study_name, round_=round_, trial=baseline.number,
                        config_digest=baseline.user_attrs["config_digest"], decode=None, prefill=None,
                        verdict={"baseline": True, "reason": "no confirmation launch of the baseline was measured"})
        return None
    # launch-to-launch noise: from these launches when there are two, else from the search's baseline
    floor = noise_floor(base_runs[0].samples(), base_runs[1].samples()) if len(base_runs) > 1 else \
        stored_speed_floor(study)
    base_values = median_objectives(base_runs)
    where = {"worker": worker_name(), "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
             "gpu": next(({"name": r.gpu.name, "uuid": r.gpu.uuid} for r in base_runs if r.gpu), None)}
    best: Champion | None = None
    verdicts = {t.number: judge_finalist(base_runs, results[t.number], floor=floor) if results[t.number] else
                {"qualified": False, "reason": "no confirmation launch was measured"} for t in finalists}
    _judge_tasks(finalists, verdicts, judge_tasks)
    for t in finalists:
        verdict = verdicts[t.number]
        db.add_finalist(study=plan.study_name, round_=round_, trial=t.number, config_digest=t.user_attrs["config_digest"],
                        decode=verdict.get("decode"), prefill=verdict.get("prefill"), verdict=verdict | where)
        if verdict["qualified"] and (best is None or verdict["speedup"] > best.speedup):
            best = Champion(trial=t.number, config=t.user_attrs["config"], decode_tok_per_s=verdict["decode"],
                            prefill_tok_per_s=verdict["prefill"], speedup=verdict["speedup"], is_baseline=False)
    db.add_finalist(study=plan.study_name, round_=round_, trial=baseline.number,
                    config_digest=baseline.user_attrs["config_digest"], decode=base_values[0], prefill=base_values[1],
                    verdict={"baseline": True, "launches": len(base_runs),
                             "noise_floor": floor.to_dict() if floor else None,
                             "noise_floor_from": "these launches" if len(base_runs) > 1 else "the search's baseline"}
                    | where)
    if best is None:
        best = Champion(trial=baseline.number, config=baseline.user_attrs["config"], decode_tok_per_s=base_values[0],
                        prefill_tok_per_s=base_values[1], speedup=1.0, is_baseline=True)
        reason = "no finalist was confirmed faster than the baseline in fresh launches"
    else:
        launches = "1 fresh launch" if plan.finalist_launches == 1 else f"{plan.finalist_launches} fresh launches"
        reason = f"confirmed in {launches} against the baseline"
    study.set_user_attr(_CHAMPION, best.__dict__ | {"reason": reason, "round": round_, "trials_at": len(trials),
                                                    "confirmed_by": where})
    return best


def _judge_tasks(finalists: list[optuna.trial.FrozenTrial], verdicts: dict[int, dict],
                 judge_tasks: Callable[[optuna.trial.FrozenTrial], dict] | None) -> None:
    """The task tier where it can change the outcome: the qualified finalists, fastest first, until one passes
    (the rest are not judged and not crowned). A finalist already judged in its trial needs nothing here."""
    qualified = sorted((t for t in finalists if verdicts[t.number]["qualified"]),
                       key=lambda t: verdicts[t.number]["speedup"], reverse=True)
    passed = False
    for t in qualified:
        verdict = verdicts[t.number]
        if t.user_attrs.get("task_tier") != "pending" or judge_tasks is None:
            passed = True  # judged in its trial (--task-tier-scope every), or no suite
            break
        tier = judge_tasks(t)
        verdict["task_tier"] = tier
        if tier["passed"]:
            passed = True
            break
        verdict["qualified"] = False
        verdict["reason"] = "task tier failed: " + "; ".join(tier.get("reasons") or ["no reason recorded"])
    if passed:
        for t in qualified:
            if "task_tier" not in verdicts[t.number] and t.user_attrs.get("task_tier") == "pending" \
                    and judge_tasks is not None and verdicts[t.number]["qualified"]:
                verdicts[t.number]["qualified"] = False  # faster ones were judged first; this one was not
                verdicts[t.number]["reason"] = "not judged on the task tier: a faster finalist passed it"


def _after_running_trials(plan: RunPlan, study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """The study's trials once no other worker is mid-trial, so every worker that ends sees the same set
    and one confirmation covers all of it. A killed worker's trial stops counting once its heartbeat is
    stale (Optuna fails it then); waiting is at most one trial's length."""
    while True:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # stable since Optuna 2.9
            optuna.storages.fail_stale_trials(study)
        trials = study.get_trials(deepcopy=False)
        running = [t.number for t in trials if t.state == optuna.trial.TrialState.RUNNING]
        if not running:
            return trials
        log.info("waiting for trial(s) %s of other workers before confirming the finalists", running)
        time.sleep(plan.heartbeat_s)


def _launch_and_bench(plan: RunPlan, space: SearchSpace, t: optuna.trial.FrozenTrial, round_: int, launch: int,
                      db: ResultsDB) -> BenchResult | None:
    """One fresh launch of a finalist, measured and stored; None when it failed or left a point unmeasured."""
    config = config_from_params(space, t.params)
    log_path = plan.study_dir / "logs" / f"final-{round_}-trial-{t.number:04d}-{launch}.log"
    try:
        with serve(model_dir=plan.model.path, config=config, log_path=log_path, pid_dir=plan.study_dir / "servers",
                   port=plan.port, vram_limit_bytes=plan.vram_bytes if plan.emulate_vram else None,
                   host_memory_limit_bytes=plan.host_memory_limit_bytes,
                   startup_timeout_s=plan.startup_timeout_s) as server:
            result = run_bench(dataclasses.replace(plan.bench_plan, salt=secrets.token_hex(4)), Endpoint(url=server.url),
                               workload=plan.workload)
    except (LaunchError, BenchError, ClientError) as exc:
        log.warning("finalist trial %d launch %d failed: %s", t.number, launch, exc)
        return None
    db.add_measurement(study=plan.study_name, trial=None, kind="finalist_bench", config_digest=config.digest,
                       payload={"trial": t.number, "round": round_, "launch": launch, **result.to_dict()}, launch=launch)
    try:
        objectives_from_bench(result)
    except Unmeasured as exc:  # a launch that left any point unmeasured does not count
        log.warning("finalist trial %d launch %d unmeasured: %s", t.number, launch, exc)
        return None
    return result


def median_objectives(runs: list[BenchResult]) -> tuple[float, float]:
    """Each objective's median over launches (of two, their mean); every launch must be fully measured."""
    values = [objectives_from_bench(r) for r in runs]
    return statistics.median(v[0] for v in values), statistics.median(v[1] for v in values)


def judge_finalist(baseline: list[BenchResult], candidate: list[BenchResult], *, floor: NoiseFloor | None) -> dict:
    """A finalist's verdict against the baseline's launches, as plain JSON data for ar_finalists.

    Qualified: called faster on at least one objective point and slower on none by bench's rule,
    with every point compared (one that either side lacks makes the finalist not comparable).
    """
    base_values, values = median_objectives(baseline), median_objectives(candidate)
    common = {"decode": values[0], "prefill": values[1], "baseline_values": list(base_values),
              "launches": len(candidate)}
    try:
        comparisons = compare(_pooled(baseline), _pooled(candidate), noise_floor=floor,
                              metrics=objective_metrics(baseline[0]))
    except MissingMetric as exc:
        return {**common, "qualified": False, "speedup": None, "reason": f"not comparable: {exc}"}
    faster = [c.metric for c in comparisons if c.verdict == "faster"]
    slower = [c.metric for c in comparisons if c.verdict == "slower"]
    qualified = bool(faster) and not slower
    reason = (f"faster on {', '.join(faster)}" if qualified else
              f"slower on {', '.join(slower)}" if slower else "not called faster on any point")
    return {**common, "qualified": qualified, "speedup": speedup_score(values, base_values), "reason": reason,
            "comparisons": [c.to_dict() for c in comparisons]}


def load_champion(study: optuna.Study) -> dict | None:
    return study.user_attrs.get(_CHAMPION)
