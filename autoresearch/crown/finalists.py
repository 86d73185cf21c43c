"""Before crowning a champion, re-measure the finalists in fresh launches and decide on those numbers.

The best of many noisy search measurements is biased upward (the optimizer's curse), so search
repeats do not count here: the top feasible configurations and the baseline are each launched
`finalist_launches` times, interleaved (baseline, A, B, baseline, A, B, ...), and a finalist is
confirmed only when autoresearch.measures.faster calls it faster than the baseline: the study's one number
(autoresearch.measures.ranking: the request-time speed-up, or the geometric mean of the two speed-ups in a
study stored before it), from each launch, above 1 beyond the launch-to-launch noise (an interval,
not a point), and slower on no objective point beyond its floor. The champion is the confirmed
finalist with the best speed-up, each side's median over its launches. A launch that left any
objective point unmeasured does not count; a finalist that cannot be compared on every point is not
confirmed. A study ranked by energy (--rank-by energy) is judged the same way on joules per request
(the same rule, energy's launch-to-launch floor, its energy points): a launch without an energy
reading does not count either, and a finalist left with none is "not measured", never 0. A finalist neither shown faster nor slower is "not shown faster": the baseline keeps the
crown, and the verdict says by how much (the interval). Where the task tier is pending
(--task-tier-scope finalists, the default), the finalists confirmed faster are judged on it fastest
first until one passes, and only that one can be crowned. If none qualifies, the baseline stays.
"""

from __future__ import annotations

import logging
import os
import statistics
import threading
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import optuna

from autoresearch.checks.judging import PENDING
from autoresearch.checks.readings import Limits, conditions, read_readings, round_drift
from autoresearch.ground.db import ResultsDB
from autoresearch.ground.errors import ConfirmedElsewhere, Unmeasured
from autoresearch.ground.plan import RunPlan, worker_gone, worker_name
from autoresearch.ground.ranked_by import GEOMEAN
from autoresearch.ground.study import baseline_trial, feasible, is_baseline, passed_speeds
from autoresearch.measures.baseline import stored_energy_floor, stored_speed_floor
from autoresearch.measures.faster import ENERGY, judge_speed
from autoresearch.measures.objectives import objectives_from_bench
from autoresearch.measures.ranking import Ranking
from bench import BenchError, BenchResult, MissingMetric, NoiseFloor, compare, noise_floor
from openai_client import ClientError
from search_space import SearchSpace, config_from_params
from serving.errors import LaunchError

__all__ = ["Champion", "confirm_finalists", "feasible_front", "judge_finalist", "load_champion", "median_objectives",
           "select_finalists", "settled_trials"]

log = logging.getLogger(__name__)
_CHAMPION = "champion"


@dataclass(frozen=True)
class Champion:
    trial: int
    config: dict
    decode_tok_per_s: float
    prefill_tok_per_s: float
    speedup: float  # by ranked_by: the request-time speed-up, E(baseline) / E(it), or the geometric mean (older studies)
    is_baseline: bool
    decode_speedup: float | None = None  # each rate's own speed-up, beside it (None: stored before they were)
    prefill_speedup: float | None = None
    ranked_by: str = GEOMEAN  # a champion stored before request time ranked was ranked by the geometric mean
    speed: dict | None = None  # autoresearch.measures.faster's verdict on the launches (interval, margin); None: older, or the baseline


def feasible_front(study: optuna.Study, *, with_pending: bool = False) -> list[optuna.trial.FrozenTrial]:
    """Feasible COMPLETE trials on the Pareto front of their speeds; `with_pending`: the front of those and the
    ones whose task tier is pending (study.passed_so_far), that the finalists' stage may judge."""
    front = passed_front(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))
    return front if with_pending else [t for t in front if feasible(t)]


def passed_front(trials: Iterable[optuna.trial.FrozenTrial]) -> list[optuna.trial.FrozenTrial]:
    """The trials through every gate that has run (passed or pending) that no other such trial beats on both
    speeds (ties kept), by trial number."""
    through = [(t, s) for t in trials if (s := passed_speeds(t)) is not None]
    return sorted((t for t, s in through if not any(o[0] >= s[0] and o[1] >= s[1] and o != s for _, o in through)),
                  key=lambda t: t.number)


def _pooled(results: list[BenchResult], ranking: Ranking) -> dict[str, tuple[float, ...]]:
    pooled: dict[str, list[float]] = {}
    for result in results:
        for metric, values in ranking.samples(result).items():
            pooled.setdefault(metric, []).extend(values)
    return {k: tuple(v) for k, v in pooled.items()}


def confirm_finalists(plan: RunPlan, study: optuna.Study, space: SearchSpace, db: ResultsDB,
                      judge_tasks: Callable[[optuna.trial.FrozenTrial], dict] | None = None) -> Champion | None:
    """Re-measure, decide, store the decision in ar_finalists and the study; None without a baseline.

    `judge_tasks(trial)` runs the task tier on a finalist whose tier is pending (--task-tier-scope
    finalists; autoresearch.checks.judging) and gives its verdict (`passed`, `reasons`, ...).

    Raises:
        ConfirmedElsewhere: another worker of the study confirms these same finished trials.
    """
    trials = settled_trials(study, poll_s=plan.heartbeat_s)
    stored = load_champion(study)
    if stored is not None and stored.get("trials_at") == len(trials):  # decided, and nothing ran since
        return Champion(**{k: stored[k] for k in Champion.__dataclass_fields__ if k in stored})
    baseline = baseline_trial(trials)
    if baseline is None:
        return None
    baseline_values = tuple(baseline.values)
    ranking = Ranking.of(study)
    finalists = select_finalists(study, ranking, baseline, plan.finalists)
    if not finalists:
        champion = Champion(trial=baseline.number, config=baseline.user_attrs["config"],
                            decode_tok_per_s=baseline_values[0], prefill_tok_per_s=baseline_values[1],
                            speedup=1.0, is_baseline=True, decode_speedup=1.0, prefill_speedup=1.0,
                            ranked_by=ranking.ranked_by)
        better = ranking.measure.better
        study.set_user_attr(_CHAMPION, champion.__dict__ | {"reason": f"no feasible candidate was {better} in search",
                                                            "trials_at": len(trials)})
        return champion

    finished = sum(t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED) for t in trials)
    claim = {"study": plan.study_name, "what": "confirm finalists", "key": f"after {finished} finished trials",
             "worker": worker_name()}
    holder = db.claim(**claim, grace_s=plan.grace_s, holder_gone=worker_gone)
    if holder is not None:  # several workers end together: one confirms, on its own GPU
        raise ConfirmedElsewhere(f"worker {holder} confirms the finalists of these {finished} trials; its "
                                 "RESULTS.md names the champion")
    with db.holding(**claim, interval_s=plan.heartbeat_s, grace_s=plan.grace_s) as lost:
        return _confirm(plan, study, space, db, baseline, finalists, trials, lost, ranking, claim, judge_tasks)


def select_finalists(study: optuna.Study, ranking: Ranking, baseline: optuna.trial.FrozenTrial,
                     n: int) -> list[optuna.trial.FrozenTrial]:
    """The n best feasible front members by the study's one number, among those it calls faster than the baseline."""
    front = [t for t in feasible_front(study, with_pending=True) if not is_baseline(t)]
    return [t for score, t in ranking.rank(front, baseline) if score > 1.0][:n]


def _confirm(plan: RunPlan, study: optuna.Study, space: SearchSpace, db: ResultsDB, baseline: optuna.trial.FrozenTrial,
             finalists: list[optuna.trial.FrozenTrial], trials: list[optuna.trial.FrozenTrial],
             lost: threading.Event, ranking: Ranking, claim: dict,
             judge_tasks: Callable[[optuna.trial.FrozenTrial], dict] | None) -> Champion | None:
    """The claimed round: fresh launches of the baseline and the finalists, interleaved, then the decision,
    written in the transaction that checks the claim is still this worker's (ResultsDB.finish).

    Raises:
        ConfirmedElsewhere: the claim was taken over while the launches ran (this worker's heartbeat
            stalled, or could not reach the database, past the grace period); the other worker decides.
    """
    # a round cut short (the confirming worker killed) left launches but no decision: the next is a new round
    launched = (r["payload"]["round"] for r in db.measurements(study=plan.study_name, kind="finalist_bench"))
    round_ = 1 + max((*(r["round"] for r in db.finalists(study=plan.study_name)), *launched), default=0)
    order = [baseline, *finalists]
    results: dict[int, list[BenchResult]] = {t.number: [] for t in order}
    unmeasured: dict[int, list[str]] = {t.number: [] for t in order}  # why a launch does not count
    for launch in range(plan.finalist_launches):
        for t in order:  # interleaved, so drift hits every configuration alike
            result = _launch_and_bench(plan, space, t, round_, launch, db, ranking)
            if isinstance(result, BenchResult):
                results[t.number].append(result)
            else:
                unmeasured[t.number].append(f"launch {launch}: {result}")

    taken_over = ConfirmedElsewhere(f"the claim to confirm round {round_} was taken over while it ran (no "
                                    f"heartbeat for over {plan.grace_s} s); the worker that took it decides")
    if lost.is_set():
        raise taken_over
    rows: list[dict] = []

    def add_finalist(**row) -> None:
        rows.append({"round_": round_, **row})

    base_runs = results[baseline.number]
    if not base_runs:
        log.error("the baseline could not be measured in any confirmation launch; no champion decided")
        add_finalist(trial=baseline.number, config_digest=baseline.user_attrs["config_digest"], decode=None,
                     prefill=None, verdict={"baseline": True, "reason": "no confirmation launch of the baseline was "
                                            "measured: " + "; ".join(unmeasured[baseline.number])})
        if not db.finish(**claim, finalist_rows=rows):
            raise taken_over
        return None
    # launch-to-launch noise (of the measure ranked by): from these launches when there are two, else the search's baseline's
    stored = stored_energy_floor(study) if ranking.measure is ENERGY else stored_speed_floor(study)
    floor = noise_floor(ranking.samples(base_runs[0]), ranking.samples(base_runs[1])) if len(base_runs) > 1 else stored
    base_values = median_objectives(base_runs)
    # the round's baseline launches against the study's first reading: drift here colours every verdict
    drift = round_drift(read_readings(study, db, plan.study_name), Limits.from_floor(stored_speed_floor(study)), round_)
    for warning in drift:
        log.warning("baseline drift in the finalists' round: %s", warning)
    where = {"worker": worker_name(), "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
             "gpu": next(({"name": r.gpu.name, "uuid": r.gpu.uuid} for r in base_runs if r.gpu), None)}
    best: Champion | None = None
    verdicts = {t.number: judge_finalist(base_runs, results[t.number], floor=floor, ranking=ranking)
                if results[t.number] else {"qualified": False, "reason": "not measured: no confirmation launch counts ("
                                           + "; ".join(unmeasured[t.number]) + ")"}
                for t in finalists}
    _judge_tasks(finalists, verdicts, judge_tasks)
    for t in finalists:
        verdict = verdicts[t.number]
        add_finalist(trial=t.number, config_digest=t.user_attrs["config_digest"], decode=verdict.get("decode"),
                     prefill=verdict.get("prefill"), verdict=verdict | where)
        if verdict["qualified"] and (best is None or verdict["speedup"] > best.speedup):
            best = Champion(trial=t.number, config=t.user_attrs["config"], decode_tok_per_s=verdict["decode"],
                            prefill_tok_per_s=verdict["prefill"], speedup=verdict["speedup"], is_baseline=False,
                            decode_speedup=verdict["decode_speedup"], prefill_speedup=verdict["prefill_speedup"],
                            ranked_by=verdict["ranked_by"], speed=verdict["speed"])
    add_finalist(trial=baseline.number, config_digest=baseline.user_attrs["config_digest"], decode=base_values[0],
                 prefill=base_values[1], verdict={"baseline": True, "launches": len(base_runs),
                                                  "noise_floor": floor.to_dict() if floor else None,
                                                  "noise_floor_of": ranking.measure.name,
                                                  "noise_floor_from": "these launches" if len(base_runs) > 1
                                                  else "the search's baseline", "drift": drift} | where)
    if best is None:
        best = Champion(trial=baseline.number, config=baseline.user_attrs["config"], decode_tok_per_s=base_values[0],
                        prefill_tok_per_s=base_values[1], speedup=1.0, is_baseline=True, decode_speedup=1.0,
                        prefill_speedup=1.0, ranked_by=ranking.ranked_by)
        reason = f"no finalist was confirmed {ranking.measure.better} than the baseline in fresh launches" + \
            (" and passed its task tier" if any("task_tier" in v for v in verdicts.values()) else "")
        closest = max((t for t in finalists if verdicts[t.number].get("speed")),
                      key=lambda t: verdicts[t.number]["speedup"], default=None)
        if closest is not None:
            reason += f" (closest, trial {closest.number}: {verdicts[closest.number]['reason']})"
    else:
        launches = "1 fresh launch" if plan.finalist_launches == 1 else f"{plan.finalist_launches} fresh launches"
        reason = f"confirmed in {launches} against the baseline, {verdicts[best.trial]['reason']}"
    if not db.finish(**claim, finalist_rows=rows):  # the claim is checked in the transaction that writes the round
        raise taken_over
    study.set_user_attr(_CHAMPION, best.__dict__ | {"reason": reason, "round": round_, "trials_at": len(trials),
                                                    "confirmed_by": where})
    return best


def _judge_tasks(finalists: list[optuna.trial.FrozenTrial], verdicts: dict[int, dict],
                 judge_tasks: Callable[[optuna.trial.FrozenTrial], dict] | None) -> None:
    """The task tier where it can change the outcome: the qualified finalists, fastest first, until one passes
    (the rest are not judged and not crowned). A finalist already judged in its trial needs nothing here."""
    if judge_tasks is None:  # no suite, or every candidate was judged in its trial
        return
    qualified = sorted((t for t in finalists if verdicts[t.number]["qualified"]),
                       key=lambda t: verdicts[t.number]["speedup"], reverse=True)
    for t in qualified:
        if t.user_attrs.get("task_tier") != PENDING:
            break  # judged in its trial (a study resumed with another --task-tier-scope): crowned as it is
        verdict = verdicts[t.number]
        verdict["task_tier"] = tier = judge_tasks(t)
        if tier["passed"]:
            break
        verdict["qualified"] = False
        verdict["reason"] = ("" if tier.get("cut") else "task tier failed: ") + \
            "; ".join(tier.get("reasons") or ["no reason recorded"])  # cut: not judged before the deadline
    for t in qualified:  # a faster finalist is crowned; the pending ones after it were not judged
        verdict = verdicts[t.number]
        if verdict["qualified"] and "task_tier" not in verdict and t.user_attrs.get("task_tier") == PENDING:
            verdict["qualified"] = False
            verdict["reason"] = "not judged on the task tier: a faster finalist passed it"


def settled_trials(study: optuna.Study, *, poll_s: float) -> list[optuna.trial.FrozenTrial]:
    """The study's trials once the trials running at the first look have ended, so that workers ending
    together see the same set and one confirmation covers it. Trials started since are not waited for
    (other workers go on starting them; a later round covers them), so the wait is at most one trial's
    length. A killed worker's trial stops counting once its heartbeat is stale (Optuna fails it then)."""
    waiting: set[int] | None = None
    while True:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # stable since Optuna 2.9
            optuna.storages.fail_stale_trials(study)
        trials = study.get_trials(deepcopy=False)
        running = {t.number for t in trials if t.state == optuna.trial.TrialState.RUNNING}
        waiting = running if waiting is None else waiting & running
        if not waiting:
            return trials
        log.info("waiting for trial(s) %s of other workers before confirming the finalists", sorted(waiting))
        time.sleep(poll_s)


def _launch_and_bench(plan: RunPlan, space: SearchSpace, t: optuna.trial.FrozenTrial, round_: int, launch: int,
                      db: ResultsDB, ranking: Ranking) -> BenchResult | str:
    """One fresh launch of a finalist, measured and stored; why it does not count where it failed, left a
    point unmeasured, or (ranked by energy) has no energy reading."""
    config = config_from_params(space, t.params)
    try:
        with plan.server_spec.launch(config, f"final-{round_}-trial-{t.number:04d}-{launch}") as server:
            result = plan.fresh_bench(server)
            machine = conditions(getattr(server, "pid", None))
    except (LaunchError, BenchError, ClientError) as exc:
        log.warning("finalist trial %d launch %d failed: %s", t.number, launch, exc)
        return f"failed: {exc}"
    db.add_measurement(study=plan.study_name, trial=None, kind="finalist_bench", config_digest=config.digest,
                       payload={"trial": t.number, "round": round_, "launch": launch, **result.to_dict(),
                                "conditions": machine}, launch=launch)
    try:
        objectives_from_bench(result)
        ranking.launch_cost(result)  # by energy: a launch without an energy reading cannot confirm anything
    except Unmeasured as exc:  # a launch that left any point unmeasured does not count
        log.warning("finalist trial %d launch %d unmeasured: %s", t.number, launch, exc)
        return f"not measured: {exc}"
    return result


def median_objectives(runs: list[BenchResult]) -> tuple[float, float]:
    """Each objective's median over launches (of two, their mean); every launch must be fully measured."""
    values = [objectives_from_bench(r) for r in runs]
    return statistics.median(v[0] for v in values), statistics.median(v[1] for v in values)


def judge_finalist(baseline: list[BenchResult], candidate: list[BenchResult], *, floor: NoiseFloor | None,
                   ranking: Ranking) -> dict:
    """A finalist's verdict against the baseline's launches, as plain JSON data for ar_finalists.

    Qualified: autoresearch.measures.faster calls it better by the study's measure (the gain from each launch
    above 1 beyond the noise, and worse on no point by bench's rule), with every point compared (one
    that either side lacks makes the finalist not comparable). Its `speedup` is the request-time
    speed-up on the ranking's mix, E(baseline) / E(finalist) in a study ranked by energy, or without a
    mix (a study ranked by the geometric mean) the geometric mean of the two speed-ups, of each side's
    median launch; `speed` holds its interval and margin. `floor` is the measure's floor.
    """
    base_values, values = median_objectives(baseline), median_objectives(candidate)
    common = {"decode": values[0], "prefill": values[1], "baseline_values": list(base_values),
              "launches": len(candidate), "decode_speedup": values[0] / base_values[0],
              "prefill_speedup": values[1] / base_values[1],
              "ranked_by": GEOMEAN if ranking.mix is None else ranking.measure.ranked_by}
    try:
        comparisons = compare(_pooled(baseline, ranking), _pooled(candidate, ranking), noise_floor=floor,
                              metrics=ranking.point_metrics(baseline[0]))
        base_costs = [ranking.launch_cost(r) for r in baseline]
        costs = [ranking.launch_cost(r) for r in candidate]
    except (MissingMetric, Unmeasured) as exc:
        return {**common, "qualified": False, "speedup": None, "reason": f"not comparable: {exc}"}
    floor_rel = ranking.cost_floor(floor, baseline) if floor is not None else None
    speed = judge_speed(base_costs, costs, floor_rel=floor_rel, points=comparisons, measure=ranking.measure)
    return {**common, "qualified": speed.faster, "speedup": speed.speedup, "speed": speed.to_dict(),
            "reason": speed.text(), "comparisons": [c.to_dict() for c in comparisons]}


def load_champion(study: optuna.Study) -> dict | None:
    return study.user_attrs.get(_CHAMPION)
