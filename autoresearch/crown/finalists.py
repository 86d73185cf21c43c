"""Before crowning a champion, re-measure the finalists in fresh launches and decide on those numbers.

The best of many noisy search measurements is biased upward (the optimizer's curse), so search
repeats do not count here: the top feasible configurations and the baseline are launched afresh, interleaved
(baseline, A, B, baseline, A, B, ...), and autoresearch.measures.faster decides, one round a family: a finalist
is confirmed only when its request time on the workload (the study's one number, autoresearch.measures.ranking;
energy per request with --rank-by energy; the geometric mean in a study stored before request time ranked) is
shown faster than the baseline's by more than the rule's minimum speed-up, and no point is shown slower beyond
the rule's tolerance. The launch is the unit of evidence (each gives one reading); the launch-to-launch spread
is pooled from every launch of the baseline the study holds (autoresearch.measures.pool) and the finalist's own;
launches are added at the rule's looks until every verdict is decisive, the rule's most is reached, or the
night's clock leaves no time for another set (`launch_budget`). A launch that left any objective point unmeasured
does not count (ranked by energy: one without an energy reading either); a finalist left with none is "not
measured", never 0. The champion is the confirmed finalist with the best speed-up (each side's geometric mean over
its launches); a finalist neither shown faster nor slower is "not shown faster" and the baseline keeps the crown,
with the interval said. Where the task tier is pending (--task-tier-scope finalists, the default), the finalists
confirmed faster are judged on it fastest first until one passes, and only that one can be crowned.
"""

from __future__ import annotations

import logging
import math
import os
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
from autoresearch.measures.baseline import stored_speed_floor
from autoresearch.measures.error_rates import LaunchNoise, error_rates
from autoresearch.measures.faster import ENERGY, SpeedVerdict, VerdictRule, verdict_rule
from autoresearch.measures.finalist_round import RoundResult, sequential_round
from autoresearch.measures.launch_stats import Reading
from autoresearch.measures.objectives import objectives_from_bench
from autoresearch.measures.pool import baseline_launches, save_pool
from autoresearch.measures.ranking import Ranking
from bench import BenchError, BenchResult
from openai_client import ClientError
from search_space import SearchSpace, config_from_params
from serving.errors import LaunchError

__all__ = ["Champion", "confirm_finalists", "feasible_front", "finalist_verdict", "load_champion", "mean_objectives",
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
    speed: dict | None = None  # autoresearch.measures.faster's verdict on the launches (interval, rule); None: older, or the baseline


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


def confirm_finalists(plan: RunPlan, study: optuna.Study, space: SearchSpace, db: ResultsDB,
                      judge_tasks: Callable[[optuna.trial.FrozenTrial], dict] | None = None,
                      launch_budget: Callable[[int], bool] | None = None) -> Champion | None:
    """Re-measure, decide, store the decision in ar_finalists and the study; None without a baseline.

    `judge_tasks(trial)` runs the task tier on a finalist whose tier is pending (--task-tier-scope
    finalists; autoresearch.checks.judging) and gives its verdict (`passed`, `reasons`, ...).
    `launch_budget(k)`: whether k more launches fit the night's clock (asked before each set past the rule's
    first look; None: no deadline).

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
        return _confirm(plan, study, space, db, baseline, finalists, trials, lost, ranking, claim, judge_tasks,
                        launch_budget)


def select_finalists(study: optuna.Study, ranking: Ranking, baseline: optuna.trial.FrozenTrial,
                     n: int) -> list[optuna.trial.FrozenTrial]:
    """The n best feasible front members by the study's one number, among those it calls faster than the baseline."""
    front = [t for t in feasible_front(study, with_pending=True) if not is_baseline(t)]
    return [t for score, t in ranking.rank(front, baseline) if score > 1.0][:n]


def _confirm(plan: RunPlan, study: optuna.Study, space: SearchSpace, db: ResultsDB, baseline: optuna.trial.FrozenTrial,
             finalists: list[optuna.trial.FrozenTrial], trials: list[optuna.trial.FrozenTrial],
             lost: threading.Event, ranking: Ranking, claim: dict,
             judge_tasks: Callable[[optuna.trial.FrozenTrial], dict] | None,
             launch_budget: Callable[[int], bool] | None) -> Champion | None:
    """The claimed round: fresh launches of the baseline and the finalists, interleaved and added until the
    verdicts are decisive, then the decision, written in the transaction that checks the claim is still this
    worker's (ResultsDB.finish).

    Raises:
        ConfirmedElsewhere: the claim was taken over while the launches ran (this worker's heartbeat
            stalled, or could not reach the database, past the grace period); the other worker decides.
    """
    # a round cut short (the confirming worker killed) left launches but no decision: the next is a new round
    launched = (r["payload"]["round"] for r in db.measurements(study=plan.study_name, kind="finalist_bench"))
    round_ = 1 + max((*(r["round"] for r in db.finalists(study=plan.study_name)), *launched), default=0)
    history = [b.reading for b in baseline_launches(study, db, plan.study_name, ranking) if b.reading is not None]
    by_name = {str(t.number): t for t in (baseline, *finalists)}
    results: dict[int, list[BenchResult]] = {t.number: [] for t in by_name.values()}
    unmeasured: dict[int, list[str]] = {t.number: [] for t in by_name.values()}  # why a launch does not count

    def launch(name: str, i: int) -> Reading | None:
        t = by_name[name]
        got = _launch_and_bench(plan, space, t, round_, i, db, ranking)
        if isinstance(got, str):
            unmeasured[t.number].append(f"launch {i}: {got}")
            return None
        results[t.number].append(got)
        return ranking.reading(got)

    rule = verdict_rule(plan)
    measured = sequential_round(launch, [str(t.number) for t in finalists], reference=str(baseline.number),
                                history=history, rule=rule, measure=ranking.measure, may_continue=launch_budget)

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
    base_values = mean_objectives(base_runs)
    # the round's baseline launches against the study's first reading: drift here colours every verdict
    drift = round_drift(read_readings(study, db, plan.study_name), Limits.from_floor(stored_speed_floor(study)), round_)
    for warning in drift:
        log.warning("baseline drift in the finalists' round: %s", warning)
    where = {"worker": worker_name(), "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
             "gpu": next(({"name": r.gpu.name, "uuid": r.gpu.uuid} for r in base_runs if r.gpu), None)}
    verdicts = {t.number: finalist_verdict(base_runs, results[t.number], measured.verdicts.get(str(t.number)),
                                           ranking=ranking, unmeasured=unmeasured[t.number]) for t in finalists}
    _judge_tasks(finalists, verdicts, judge_tasks)
    best: Champion | None = None
    for t in finalists:
        verdict = verdicts[t.number]
        add_finalist(trial=t.number, config_digest=t.user_attrs["config_digest"], decode=verdict.get("decode"),
                     prefill=verdict.get("prefill"), verdict=verdict | where)
        if verdict["qualified"] and (best is None or verdict["speedup"] > best.speedup):
            best = Champion(trial=t.number, config=t.user_attrs["config"], decode_tok_per_s=verdict["decode"],
                            prefill_tok_per_s=verdict["prefill"], speedup=verdict["speedup"], is_baseline=False,
                            decode_speedup=verdict["decode_speedup"], prefill_speedup=verdict["prefill_speedup"],
                            ranked_by=verdict["ranked_by"], speed=verdict["speed"])
    noise = _round_noise(history, measured, baseline, ranking, rule, len(finalists))
    add_finalist(trial=baseline.number, config_digest=baseline.user_attrs["config_digest"], decode=base_values[0],
                 prefill=base_values[1], verdict={"baseline": True, "launches": len(base_runs),
                                                  "history": len(history), "sets": measured.sets,
                                                  "stopped": measured.stopped, "rule": rule.to_dict(),
                                                  "measure": ranking.measure.name,
                                                  "noise": noise, "drift": drift} | where)
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
        reason = f"confirmed in fresh launches against the baseline, {verdicts[best.trial]['reason']}"
    if not db.finish(**claim, finalist_rows=rows):  # the claim is checked in the transaction that writes the round
        raise taken_over
    save_pool(study, db, plan.study_name)  # this round's baseline launches join the search's reference
    study.set_user_attr(_CHAMPION, best.__dict__ | {"reason": reason, "round": round_, "trials_at": len(trials),
                                                    "confirmed_by": where, "error_rates": noise.get("error_rates")})
    return best


def _round_noise(history: list[Reading], measured: RoundResult, baseline: optuna.trial.FrozenTrial,
                 ranking: Ranking, rule: VerdictRule, finalists: int) -> dict:
    """The baseline's launch-to-launch spread over every launch the study now holds, and the verdict's error
    rates at that spread, with this round's launches (RESULTS.md states them under the champion)."""
    pool = [*history, *measured.launches[str(baseline.number)]]
    out: dict = {"launches": len(pool)}
    if ranking.mix is None:
        return out
    cost = ranking.mix.energy_j if ranking.measure is ENERGY else ranking.mix.time_s
    noise = LaunchNoise.of(pool, cost)
    if noise is None:
        out["why_none"] = "fewer than two measured launches of the baseline"
        return out
    out["log_sd"] = dict(noise.log_sd)
    try:
        rates = error_rates(noise, finalists=finalists, history=len(history), rule=rule.with_most(max(measured.sets,
                                                                                                       rule.min_launches)))
    except Exception as exc:  # noqa: BLE001 - the error rates describe the verdict; they never change it
        log.warning("the verdict's error rates could not be simulated: %s", exc)
        out["why_none"] = f"not simulated: {exc}"
        return out
    out["error_rates"] = rates.to_dict()
    return out


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


def mean_objectives(runs: list[BenchResult]) -> tuple[float, float]:
    """Each objective's geometric mean over launches, as the verdict's ratios take them; every launch must be
    fully measured."""
    values = [objectives_from_bench(r) for r in runs]
    return tuple(math.exp(sum(math.log(v[i]) for v in values) / len(values)) for i in (0, 1))


def finalist_verdict(baseline: list[BenchResult], candidate: list[BenchResult], speed: SpeedVerdict | None, *,
                     ranking: Ranking, unmeasured: list[str] = ()) -> dict:
    """A finalist's verdict against the baseline's launches, as plain JSON data for ar_finalists: qualified where
    autoresearch.measures.faster called it faster (`speed`: its verdict on this round's launches, None where no
    launch of it counted), with each objective's ratio by the same estimator (geometric means over launches)."""
    if not candidate or speed is None:
        return {"qualified": False, "speedup": None, "reason": "not measured: no confirmation launch counts ("
                + "; ".join(unmeasured) + ")"}
    base_values, values = mean_objectives(baseline), mean_objectives(candidate)
    return {"decode": values[0], "prefill": values[1], "baseline_values": list(base_values),
            "launches": len(candidate), "decode_speedup": values[0] / base_values[0],
            "prefill_speedup": values[1] / base_values[1],
            "ranked_by": GEOMEAN if ranking.mix is None else ranking.measure.ranked_by,
            "qualified": speed.faster, "speedup": speed.speedup, "speed": speed.to_dict(), "reason": speed.text(),
            **({"unmeasured": list(unmeasured)} if unmeasured else {})}


def load_champion(study: optuna.Study) -> dict | None:
    return study.user_attrs.get(_CHAMPION)
