"""One study as RESULTS.md shows it: `read_snapshot` reads Optuna's trials and the results store once (one
read of each, autoresearch.report.store_read) into the typed records of autoresearch.report.records, and autoresearch/report/RESULTS.md.jinja renders them (autoresearch.report.results_md).

Every number is read back from what is stored; nothing here is computed except ratios of stored
numbers and which stored rows a table shows.
"""

from __future__ import annotations

import datetime as dt
import json

import optuna

from autoresearch.champion.crowned import champion_change_costs, unfinished_launches
from autoresearch.checks.readings import read_drift
from autoresearch.crown.finalists import feasible_front, load_champion
from autoresearch.ground.db import ResultsDB
from autoresearch.ground.errors import Unmeasured
from autoresearch.ground.outcome import TrialOutcome
from autoresearch.ground.plan import RunPlan
from autoresearch.ground.ranked_by import ENERGY_RANKED, GEOMEAN, RANKED_BY, RANKED_BY_ATTR, ranking_label
from autoresearch.ground.speeds import measured_values, speeds
from autoresearch.ground.study import baseline_trial, feasible, is_baseline, tasks_pending
from autoresearch.measures.energy import read_energy
from autoresearch.measures.error_rates import ErrorRates
from autoresearch.measures.faster import VerdictRule
from autoresearch.measures.launch_costs import Launches, finalist_launches
from autoresearch.measures.objectives import DECODE_RATE, PREFILL_RATE
from autoresearch.measures.pool import baseline_payloads
from autoresearch.measures.ranking import POOL_ATTR, Ranking
from autoresearch.measures.request_time import RequestMix
from autoresearch.report.per_kind import read_decode_by_kind
from autoresearch.report.ratios import LaunchCosts, Ratios, ratios
from autoresearch.report.records import (
    Baseline,
    Champion,
    Confirmer,
    FinalistLaunches,
    FinalistRow,
    Finalists,
    FirstTrial,
    FrontRow,
    Measured,
    MeasuredRow,
    Point,
    Provenance,
    StudySnapshot,
    TaskDecisionRow,
    TasksetRow,
    TaskTier,
    Verdict,
    changed_knobs,
)
from autoresearch.report.store_read import EvalReads, StoreRows, study_in_memory
from autoresearch.trial.provenance import gpu_uuid
from autoresearch.trial.suite_concurrency import CONCURRENCY_KEY
from bench.metrics import Metric
from eval import EvalStore
from results import to_jsonable

__all__ = ["read_finalists", "read_fidelity_gate", "read_measured", "read_snapshot",
           "read_task_tier"]


def _gpu_of(details: dict) -> str:
    """A short name of the physical GPU a measurement ran on (UUIDs tell apart cards of one model)."""
    name = ((details.get("gpu") or {}).get("details") or {}).get("name", "cpu")
    uuid = gpu_uuid(details)
    return f"{name} …{uuid[-6:]}" if uuid else str(name)


def _stopped(trials: list[optuna.trial.FrozenTrial], baseline) -> str | None:
    if baseline is not None:
        return None
    failed = [t for t in trials if is_baseline(t)
              and TrialOutcome.of(t) not in (None, TrialOutcome.BASELINE, TrialOutcome.DUPLICATE)]
    return "; ".join(failed[-1].user_attrs.get("reasons", [])) if failed else None


def measured_column(key: str) -> str | None:
    """The title of a bench headline key's column in the measured table, or None to leave it out.

    A new column: return its title here (decode columns sort first, then by key)."""
    metric = Metric.parse(key)
    if metric.client_timed or metric.rate == PREFILL_RATE:
        return key.replace("_tok_per_s", "")
    return None


def read_measured(study: optuna.Study, db: ResultsDB, study_name: str, base_cfg: dict) -> Measured:
    gpus = {row["trial"]: _gpu_of(row["details"]) for row in db.provenance(study=study_name)}
    rows: list[MeasuredRow] = []
    keys: list[str] = []
    for t in study.get_trials(deepcopy=False):
        bench = [r["payload"] for r in db.measurements(study=study_name, kind="bench", trial=t.number)
                 if r["launch"] == 0]
        if not bench:
            continue
        headline = bench[-1].get("headline", {})
        keys += [k for k in headline if k not in keys and measured_column(k) is not None]
        fid = [r["payload"]["metrics"] for r in db.measurements(study=study_name, kind="fidelity", trial=t.number)]
        outcome = TrialOutcome.BASELINE if is_baseline(t) else (TrialOutcome.of(t) or t.state.name)
        rows.append(MeasuredRow(trial=t.number, outcome=outcome, speeds=headline, fidelity=fid[-1] if fid else None,
                                gpu=gpus.get(t.number, "-"), changes=changed_knobs(t.user_attrs.get("config", {}),
                                                                                   base_cfg)))
    keys.sort(key=lambda k: (not Metric.parse(k).is_decode, k))
    return Measured(columns=[(k, measured_column(k)) for k in keys], rows=rows, gpu_count=len(set(gpus.values())))


def _decisions(plan: RunPlan, store: EvalStore) -> list[dict]:
    return [r for r in store.decision_rows(plan.model.manifest_hash)
            if str(r["candidate_label"]).startswith(plan.study_name + ":")]


def read_fidelity_gate(plan: RunPlan, store: EvalStore) -> dict:
    """The fidelity gate as its stored decisions applied it (the plan's, before any decision exists)."""
    rows = _decisions(plan, store)
    return rows[-1]["policy"]["fidelity"] if rows else to_jsonable(plan.gate_policy)["fidelity"]


def read_task_tier(plan: RunPlan, store: EvalStore, baseline_tasksets: list[TasksetRow] = ()) -> TaskTier:
    """Every candidate's paired test per taskset (verdicts from before the sequential test are left out),
    and in guard mode what the guard can detect on the baseline's tasks (the policy's design, exactly)."""
    rows = []
    for row in _decisions(plan, store):
        trial = str(row["candidate_label"]).split(":")[-2].removeprefix("trial-")
        rows += [TaskDecisionRow(trial, v) for v in row["evidence"].get("tasksets") or [] if "decision" in v]
    policy = plan.gate_policy.tasks
    guard = ()
    if policy.mode == "guard":
        from eval.guard import state_guard

        k = len(baseline_tasksets)
        guard = tuple(state_guard(t.name, policy.guard(t.result.tasks, k), power=policy.power,
                                  flips=policy.planned_discordance,
                                  baseline_right=sum(e.correct(policy.full_credit) for e in t.result.episodes))
                      for t in baseline_tasksets)
    return TaskTier(policy=policy, decisions=rows, guard=guard)


def _finalist_row(f: dict, launches: dict[tuple[int, int], FinalistLaunches]) -> FinalistRow:
    v = f["verdict"]
    mine = launches.get((f["round"], f["trial"]))
    seconds = mine.seconds if mine else ()
    if v.get("baseline") is True:  # rows of older versions hold the baseline's numbers under this key
        return FinalistRow(f["round"], f["trial"], f["decode_tok_per_s"], f["prefill_tok_per_s"], 1.0, "baseline",
                           1.0, 1.0, 1.0, seconds)
    decision = v.get("reason", "not confirmed faster")  # with autoresearch.measures.faster's interval, where it was judged so
    if v.get("qualified"):  # an older row's reason named the points it was faster on
        decision = f"confirmed {decision}" if "speed" in v else "confirmed faster"
    if mine is not None and mine.ratios is not None:  # the three, from the same launches by the one estimator
        r = mine.ratios
        return FinalistRow(f["round"], f["trial"], f["decode_tok_per_s"], f["prefill_tok_per_s"], v.get("speedup"),
                           decision, r.request, r.decode, r.prefill, seconds, r.note)
    # no launch records to take them from (a row stored before they were kept): the verdict's own numbers
    request = v.get("speedup") if v.get("ranked_by") == RANKED_BY else None
    return FinalistRow(f["round"], f["trial"], f["decode_tok_per_s"], f["prefill_tok_per_s"], v.get("speedup"), decision,
                       request, v.get("decode_speedup"), v.get("prefill_speedup"), seconds)


def read_finalists(finals: list[dict], launches: dict[tuple[int, int], FinalistLaunches] | None = None) -> Finalists:
    """`launches` by (round, trial): each counted launch's request time, and the request time's, decode's and
    prefill's T(baseline) / T(finalist) from them by the decision's estimator (autoresearch.report.ratios); a
    row without launch records shows its verdict's own numbers."""
    confirmer = None
    if finals:
        last = [f["verdict"] for f in finals if f["round"] == finals[-1]["round"]]
        if who := next((v for v in last if v.get("worker")), None):  # one worker confirms, on one GPU
            confirmer = Confirmer(finals[-1]["round"], who["worker"], who.get("gpu") or {},
                                  who.get("cuda_visible_devices"))
    return Finalists(rows=[_finalist_row(f, launches or {}) for f in finals], confirmer=confirmer)


def _read_baseline(study: optuna.Study, db: ResultsDB, study_name: str, baseline) -> Baseline | None:
    if baseline is None:
        return None
    evidence = study.user_attrs.get("baseline_evidence", {})
    floor = sorted((k, v) for k, v in (evidence.get("speed_floor") or {}).items()
                   if k.startswith((DECODE_RATE, PREFILL_RATE)))
    fid = [r["payload"] for r in db.measurements(study=study_name, kind="fidelity", trial=baseline.number)]
    config = baseline.user_attrs["config"]
    return Baseline(trial=baseline.number, decode=baseline.values[0], prefill=baseline.values[1],
                    config_digest=baseline.user_attrs.get("config_digest", "")[:12], speed_floor=floor,
                    fidelity_floor=fid[-1]["metrics"] if fid else None,
                    config_json=json.dumps(config, indent=1, sort_keys=True))


def _read_champion(study: optuna.Study, base_cfg: dict, finalists: Finalists) -> Champion | None:
    champion = load_champion(study)
    if not champion:
        return None
    ranked_by = champion.get("ranked_by") or GEOMEAN
    row = next((r for r in reversed(finalists.rows) if r.trial == champion["trial"]
                and champion.get("round") in (None, r.round)), None)
    note = None
    if champion["is_baseline"]:
        side = (1.0, 1.0, 1.0)
    elif row is not None:  # its finalists' row: the three from the same launches by the one estimator
        side, note = (row.request_speedup, row.decode_speedup, row.prefill_speedup), row.parts_note
    else:
        side = (champion["speedup"] if ranked_by == RANKED_BY else None, champion.get("decode_speedup"),
                champion.get("prefill_speedup"))
    return Champion(trial=None if champion["is_baseline"] else champion["trial"],
                    decode=champion["decode_tok_per_s"], prefill=champion["prefill_tok_per_s"],
                    speedup=champion["speedup"], reason=champion["reason"],
                    changes=changed_knobs(champion["config"], base_cfg), ranked_by=ranked_by,
                    request_speedup=side[0], decode_speedup=side[1], prefill_speedup=side[2], parts_note=note)


def _request_mix(study: optuna.Study, db: ResultsDB, study_name: str, baseline) -> RequestMix | None:
    """The study's stored mix, or for a study stored before it one made from its baseline's bench record."""
    stored = Ranking.of(study).mix
    if stored is not None or baseline is None:
        return stored
    rows = [r["payload"] for r in db.measurements(study=study_name, kind="bench", trial=baseline.number)
            if r["launch"] == 0]
    try:
        return RequestMix.from_record(rows[0]) if rows else None
    except Unmeasured:  # no decode point: nothing to time
        return None


def _finalist_launches(db: ResultsDB, study_name: str, mix: RequestMix | None, baseline_trial: int | None,
                       by_energy: bool) -> dict[tuple[int, int], FinalistLaunches]:
    rows = db.measurements(study=study_name, kind="finalist_bench")
    counted = finalist_launches(rows, mix, by_energy=by_energy)  # the launches the decision counted
    if mix is None:  # no request time to count launches by: each fully measured launch
        counted = {}
        for r in rows:
            counted.setdefault((r["payload"]["round"], r["payload"]["trial"]), []).append(r["payload"])
        counted = {k: Launches(tuple(sorted(ps, key=lambda p: p.get("launch", 0))), ()) for k, ps in counted.items()}
    costs = {key: LaunchCosts.of(mix, launches.payloads) for key, launches in counted.items()}
    out = {}
    for (round_, trial), mine in counted.items():
        base = costs.get((round_, baseline_trial))
        found = ratios(base, costs[(round_, trial)], label=f"trial {trial} (round {round_})") \
            if base is not None and trial != baseline_trial else None
        out[(round_, trial)] = FinalistLaunches(mine.seconds, found)
    return out


def _search_payloads(db: ResultsDB, study_name: str) -> dict[int, dict]:
    return {r["trial"]: r["payload"] for r in db.measurements(study=study_name, kind="bench")
            if r["launch"] == 0 and r["trial"] is not None}


def _search_ratios(mix: RequestMix | None, searched: dict[int, dict], reference: list[dict], trial: int) -> Ratios:
    """A trial's search launch against the baseline's launches pooled (`reference`: every one the study holds, as
    the search ranks by them), by the one estimator."""
    if not reference or trial not in searched:
        return Ratios(None, None, None)
    return ratios(LaunchCosts.of(mix, reference), LaunchCosts.of(mix, [searched[trial]]), label=f"trial {trial}")


def _read_verdict(finals: list[dict]) -> Verdict | None:
    """The last round's rule, spread and error rates, as its baseline row stored them (None: no round, or one
    stored before the verdict pooled launches)."""
    rows = [f["verdict"] for f in finals if f["verdict"].get("baseline") is True and "rule" in f["verdict"]]
    if not rows:
        return None
    v = rows[-1]
    noise = v.get("noise") or {}
    rates = noise.get("error_rates")
    return Verdict(rule=VerdictRule.from_dict(v["rule"]).text(), launches=noise.get("launches", 0),
                   sets=v.get("sets", 0), stopped=v.get("stopped", ""),
                   error_rates=ErrorRates.from_dict(rates).text() if rates else None,
                   why_none=noise.get("why_none"))


def _read_tasksets(db: ResultsDB, store: EvalStore, study_name: str, trial: int | None, run: str) -> list[TasksetRow]:
    rows = db.measurements(study=study_name, kind="suite", trial=trial) if trial is not None else []
    if not rows:
        return []
    result = store.load_suite_result(rows[-1]["payload"]["suite_run_id"])
    return [TasksetRow(t.name, run, t) for t in result.tasksets]


def _baseline_tasksets(db: ResultsDB, store: EvalStore, study_name: str, trial: int | None) -> list[TasksetRow]:
    """The baseline's answers from its own trial; where the lazy baseline answered on for later judgments,
    the row says how far (the judgments' records), so a short first run is not read as the whole."""
    rows = _read_tasksets(db, store, study_name, trial, "baseline")
    answered: dict[str, int] = {}
    for m in db.measurements(study=study_name, kind="suite"):
        for name, n in (m["payload"].get("baseline_answered") or {}).items():
            answered[name] = max(answered.get(name, 0), n)
    return [TasksetRow(r.name, f"baseline (its own trial; {answered[r.name]} answered in all, as judgments needed)", r.result)
            if answered.get(r.name, 0) > r.result.tasks else r for r in rows]


def _read_provenance(plan: RunPlan, db: ResultsDB) -> Provenance | None:
    prov = db.provenance(study=plan.study_name)
    if not prov:
        return None
    last = prov[-1]
    details = last["details"]
    project = details.get("project") or {}
    return Provenance(
        manifest_hash=plan.model.manifest_hash, manifest_path=str(plan.model.manifest_path), engine=last["engine"],
        engine_version=last["engine_version"], torch_version=last["torch_version"],
        cuda_version=(details.get("server_info") or {}).get("cuda_version", "-"), gpu_name=last["gpu_name"],
        gpu_driver=last["gpu_driver"],
        power_limit_w=(((details.get("gpu") or {}).get("details") or {}).get("power_limit_w")),
        platform=details.get("host", {}).get("platform", "-"), commit=project.get("commit"),
        dirty=bool(project.get("dirty")))


def read_snapshot(plan: RunPlan, study: optuna.Study, db: ResultsDB, store: EvalStore) -> StudySnapshot:
    """Everything RESULTS.md shows of this study, from one read of the store (autoresearch.report.store_read)."""
    study, db, store = study_in_memory(study), StoreRows.read(db, plan.study_name), EvalReads(store)
    trials = study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    baseline = baseline_trial(complete)
    base_cfg = baseline.user_attrs["config"] if baseline else {}

    mix = _request_mix(study, db, plan.study_name, baseline)
    searched = _search_payloads(db, plan.study_name)
    pool = study.user_attrs.get(POOL_ATTR)  # the search's reference: every launch of the baseline (else its first)
    reference = baseline_payloads(study, db, plan.study_name) if pool else \
        [searched[baseline.number]] if baseline and baseline.number in searched else []
    front = [FrontRow(t.number, *measured_values(t), (r := _search_ratios(mix, searched, reference, t.number)).decode,
                      r.prefill, changed_knobs(t.user_attrs.get("config", {}), base_cfg), r.request, tasks_pending(t))
             for t in feasible_front(study, with_pending=True)]
    front.sort(key=lambda r: (r.request_ratio is None, -(r.request_ratio or 0.0), -r.decode))
    first = [FirstTrial(t.number, "--enqueue" if t.user_attrs.get("enqueued") else "lever",
                        TrialOutcome.of(t) or t.state.name.lower(),
                        changed_knobs(t.user_attrs["config"], base_cfg) if "config" in t.user_attrs
                        else "not run yet",  # an enqueued trial still waiting has no config: not the baseline's
                        (r := _search_ratios(mix, searched, reference, t.number)).request, r.decode, r.prefill)
             for t in trials if (t.user_attrs.get("enqueued") or t.user_attrs.get("lever"))
             and TrialOutcome.of(t) is not TrialOutcome.DEFERRED]  # its re-enqueued copy measured it
    rejected = [(t.number, TrialOutcome.of(t), "; ".join(t.user_attrs.get("reasons", []))[:300].replace("|", "/"),
                 changed_knobs(t.user_attrs.get("config", {}), base_cfg))
                for t in trials if not is_baseline(t)
                and (outcome := TrialOutcome.of(t)) is not None and outcome.rejected]
    on_front = {r.trial for r in front}
    points = [Point(t.number, *speed, feasible(t), t.number in on_front, tasks_pending(t))
              for t in complete if (speed := speeds(t)) is not None]
    by_energy = study.user_attrs.get(RANKED_BY_ATTR) == ENERGY_RANKED
    finalists = read_finalists(db.finalists(study=plan.study_name),
                               _finalist_launches(db, plan.study_name, mix, baseline.number if baseline else None,
                                                  by_energy))
    champion = _read_champion(study, base_cfg, finalists)
    tasksets = task_tier = None
    if plan.suite != "none":
        champ_trial = champion.trial if champion else None
        base_rows = _baseline_tasksets(db, store, plan.study_name, baseline.number if baseline else None)
        tasksets = base_rows + _read_tasksets(db, store, plan.study_name, champ_trial, f"champion (trial {champ_trial})")
        task_tier = read_task_tier(plan, store, base_rows)
    return StudySnapshot(
        plan=plan, generated=dt.datetime.now(dt.UTC), stopped=_stopped(trials, baseline),
        fidelity_gate=read_fidelity_gate(plan, store), champion=champion, front=front,
        finalists=finalists, ranking=ranking_label(study.user_attrs.get("ranked_by")), mix=mix, first_trials=first,
        baseline=_read_baseline(study, db, plan.study_name, baseline), rejected=rejected,
        measured=read_measured(study, db, plan.study_name, base_cfg), tasksets=tasksets, task_tier=task_tier,
        provenance=_read_provenance(plan, db), points=points,
        decode_by_kind=read_decode_by_kind(db, plan.study_name, study.user_attrs.get("bench_plan") or {},
                                           baseline.number, champion.trial if champion else None)
        if baseline else None,
        change_costs=champion_change_costs(study),
        minimization_launches=unfinished_launches(study, db, plan.study_name),
        drift=read_drift(plan, study, db),
        night_plan=study.user_attrs.get("night_plan"), night=study.user_attrs.get("night"),
        suite_concurrency=study.user_attrs.get(CONCURRENCY_KEY), pool=pool,
        verdict=_read_verdict(db.finalists(study=plan.study_name)),
        energy=read_energy(db, plan.study_name, mix, baseline.number if baseline else None, front, finalists.rows,
                           champion, by_energy=by_energy))
