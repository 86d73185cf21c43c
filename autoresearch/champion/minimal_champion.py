"""The loop's minimization of a confirmed champion: real fresh launches, measured by bench, stored and resumable.

autoresearch.champion.minimize decides; this module gives it its measurement: each launch is a fresh server
measured by bench on the study's plan, timed as the workload's mean request time
(autoresearch.measures.request_time, the mix of the baseline's bench), and stored in ar_measurements
(kind `minimize_bench`) under a label unique within the minimization. A loop killed mid-way resumes
by answering stored labels from the database: the decisions replay, and only the missing launches
run. When the minimal champion has settings TabbyAPI cannot express, the subset TabbyAPI runs is
measured too, in fresh launches interleaved with the champion's, so `export --format tabbyapi` can
state its speed. A study ranked by energy is minimized, and its subset chosen, on energy per request
(RequestMix.energy_j, the same requests): a launch without an energy reading does not count, and says why.

Usage:
    minimization = minimize_champion(plan, study, db, champion)   # None: the baseline is the champion
"""

from __future__ import annotations

import dataclasses
import logging

import optuna

from autoresearch.champion.change_costs import MINIMIZATION_ATTR, MINIMIZE_KIND, signed_change
from autoresearch.champion.crowned import minimized_digest, minimized_stamp
from autoresearch.champion.minimization import Minimization
from autoresearch.champion.minimize import Launch, against_baseline, judge, minimize
from autoresearch.champion.tabbyapi import expressible_subset, to_tabbyapi
from autoresearch.crown.finalists import Champion, load_champion
from autoresearch.ground.db import ResultsDB
from autoresearch.ground.errors import Unmeasured
from autoresearch.ground.plan import RunPlan
from autoresearch.ground.ranked_by import ENERGY_RANKED, RANKED_BY_ATTR
from autoresearch.ground.study import baseline_trial, model_is_hybrid
from autoresearch.measures.faster import ENERGY, FASTER, TIME, Measure, measure_of
from autoresearch.measures.objectives import energy_objectives, objectives_from_bench
from autoresearch.measures.pool import baseline_payloads
from autoresearch.measures.request_time import RequestMix
from autoresearch.night.clock import versus_baseline_launches
from bench import BenchError, BenchResult, mark_stalls
from openai_client import ClientError
from serving.config import ServingConfig
from serving.errors import LaunchError

__all__ = ["KIND", "minimize_champion", "record_gate"]

log = logging.getLogger(__name__)
KIND = MINIMIZE_KIND


class _Launcher:
    """measure(config, label) for autoresearch.champion.minimize: a stored launch of that label, or a fresh one."""

    def __init__(self, plan: RunPlan, db: ResultsDB, mix: RequestMix, key: str, ranked: Measure = TIME):
        self.plan, self.db, self.mix, self.key, self.ranked = plan, db, mix, key, ranked
        rows = db.measurements(study=plan.study_name, kind=KIND)
        self.stored = {r["payload"]["label"]: r["payload"] for r in rows if r["payload"].get("minimization") == key}

    def __call__(self, config: ServingConfig, label: str) -> Launch | None:
        payload = self.stored.get(label)
        if payload is not None and payload["config_digest"] == config.digest:
            return self._launch(BenchResult.from_dict(payload["bench"]), label) if payload["bench"] else None
        result = self._bench(config, label)
        self.db.add_measurement(study=self.plan.study_name, trial=None, kind=KIND, config_digest=config.digest,
                                payload={"minimization": self.key, "label": label, "config_digest": config.digest,
                                         "bench": result.to_dict() if result else None},
                                launch=int(label.rsplit("/", 1)[-1]))
        return self._launch(result, label) if result else None

    def _bench(self, config: ServingConfig, label: str) -> BenchResult | None:
        safe = label.replace("/", "-")
        try:
            with self.plan.server_spec.launch(config, f"minimize-{self.key[:8]}-{safe}") as server:
                return self.plan.fresh_bench(server)
        except (LaunchError, BenchError, ClientError) as exc:
            log.warning("minimization launch %s failed: %s", label, exc)
            return None

    def baseline_history(self, study: optuna.Study) -> list[Launch]:
        """The baseline's launches the study stored before (its trial's, drift checks', finalists' rounds), read
        as this minimization reads its own (a launch with a point unmeasured does not count)."""
        return [launch for i, payload in enumerate(baseline_payloads(study, self.db, self.plan.study_name))
                if (launch := self._launch(mark_stalls(BenchResult.from_dict(payload)), f"history/{i}")) is not None]

    def _launch(self, result: BenchResult, label: str) -> Launch | None:
        try:
            decode, prefill = objectives_from_bench(result)
            launch = Launch(request_time_s=self.mix.time_s(result.headline()), decode_tok_per_s=decode,
                            prefill_tok_per_s=prefill)
        except Unmeasured as exc:  # a launch with a point unmeasured does not count, as for the finalists
            log.warning("minimization launch %s unmeasured: %s", label, exc)
            return None
        if self.ranked != ENERGY:
            return launch
        try:  # ranked by energy: no reading is no energy, never 0 J (the minimization says why it does not count)
            joules = self.mix.energy_j(result.energy_headline())
            decode_j, prefill_j = energy_objectives(result)
        except Unmeasured as exc:
            return dataclasses.replace(launch, energy_unmeasured=str(exc))
        return dataclasses.replace(launch, energy_j=joules, decode_tok_per_j=decode_j, prefill_tok_per_j=prefill_j)


def _baseline_mix(study: optuna.Study, db: ResultsDB, plan: RunPlan) -> tuple[ServingConfig, RequestMix]:
    baseline = baseline_trial(study)
    rows = [r for r in db.measurements(study=plan.study_name, kind="bench", trial=baseline.number) if r["launch"] == 0]
    if not rows:
        raise Unmeasured(f"the baseline (trial {baseline.number}) has no stored bench record to take the workload's "
                         "requests from")
    return ServingConfig.from_dict(baseline.user_attrs["config"]), RequestMix.from_record(rows[0]["payload"])


def minimize_champion(plan: RunPlan, study: optuna.Study, db: ResultsDB, champion: Champion) -> Minimization | None:
    """Minimize the confirmed champion once (stored in the study with the champion it minimized; a resumed loop
    replays its stored launches, and a minimization of another champion is replaced).

    Raises:
        autoresearch.champion.minimize.MinimizeError: the champion could not be measured in some round.
        Unmeasured: the baseline's bench record is missing.
    """
    if champion.is_baseline:
        return None
    config = ServingConfig.from_dict(champion.config)
    stored = study.user_attrs.get(MINIMIZATION_ATTR)
    mine = stored if minimized_digest(stored) == config.digest else None  # another champion's is replaced
    baseline, mix = _baseline_mix(study, db, plan)
    key = config.digest
    ranked = measure_of(study.user_attrs.get(RANKED_BY_ATTR))
    measure = _Launcher(plan, db, mix, key, ranked)
    launches = plan.minimize_launches
    if mine and "tried" in (mine.get("extra", {}).get("tabbyapi_subset") or {"tried": ()}):
        done = Minimization.from_dict(mine)
        if done.versus_baseline is not None or done.minimal.digest == config.digest:
            return done
        # stored before the round against the baseline existed: that round alone, its decisions kept
        done = dataclasses.replace(done, launches=done.launches + versus_baseline_launches(launches),
                                   versus_baseline=against_baseline(measure, baseline, done.minimal, launches=launches,
                                                                    ranked=ranked,
                                                                    history=measure.baseline_history(study)))
        study.set_user_attr(MINIMIZATION_ATTR, mine | done.to_dict() | {"minimized": _stamp(study, champion, config)})
        return done
    # (a minimization stored before both TabbyAPI subsets were measured is replayed from its stored launches, and
    # measures what it lacks)
    result = minimize(config, baseline, measure, launches=launches, max_launches=plan.minimize_max_launches,
                      ranked=ranked, baseline_history=measure.baseline_history(study))
    extra = dict(result.extra)
    if result.minimal.digest == config.digest:  # nothing removed: the confirmed champion, already gated
        extra["gate"] = {"passed": True, "reason": "the minimal champion is the confirmed champion",
                         "digest": config.digest}
    elif mine and "gate" in mine.get("extra", {}) and \
            Minimization.from_dict(mine).minimal.digest == result.minimal.digest:
        extra["gate"] = mine["extra"]["gate"]  # replayed to the same minimal champion: judged once, not again
    hybrid = model_is_hybrid(study)
    if config.engine == "exllamav3" and not to_tabbyapi(result.minimal, model_path=plan.model.path,
                                                        hybrid=hybrid).equivalent:
        extra["tabbyapi_subset"] = subset = _tabbyapi_subset(config, result.minimal, measure, launches, hybrid=hybrid,
                                                             ranked=ranked)
        judged = ((mine or {}).get("extra", {}).get("tabbyapi_subset") or {})
        if judged.get("gate") is not None and judged.get("digest") == subset["digest"]:
            subset["gate"] = judged["gate"]  # replayed to the same subset: judged once, not again
    result = dataclasses.replace(result, extra=extra)
    study.set_user_attr(MINIMIZATION_ATTR, result.to_dict() | {"minimized": _stamp(study, champion, config),
                                                               "request_mix": mix.to_dict()})
    return result


def _stamp(study: optuna.Study, champion: Champion, config: ServingConfig) -> dict:
    """The champion minimized, with the round that crowned it (as the finalists' stage stored it)."""
    crowned = load_champion(study) or {}
    return minimized_stamp(champion.trial, config, crowned.get("round") if crowned.get("trial") == champion.trial
                           else None)


def _tabbyapi_subset(champion: ServingConfig, minimal: ServingConfig, measure: _Launcher, launches: int, *,
                     hybrid: bool, ranked: Measure = TIME) -> dict:
    """What TabbyAPI should run of a champion it cannot fully express: the expressible subset of the minimal
    champion, or of the confirmed one where that differs (the minimal champion's removals were judged with the
    settings TabbyAPI lacks in place: without them, a removed change can be worth keeping again), each
    measured in fresh launches interleaved with the champion's. The confirmed champion's subset is chosen only
    when autoresearch.measures.faster calls it faster than the minimal champion's (their own launches, the minimal's as
    the reference; `ranked=ENERGY`: calls it less energy, and launches without an energy reading do not count);
    otherwise the minimal champion's. Returns its digest, config, cost and `chosen` (why), and every subset tried."""
    subsets = {"minimal": expressible_subset(minimal, hybrid=hybrid)}
    full = expressible_subset(champion, hybrid=hybrid)
    if full.digest != subsets["minimal"].digest:
        subsets["champion"] = full
    labels = {"minimal": "tabbyapi/subset", "champion": "tabbyapi/champion-subset"}
    champ: list = []
    runs: dict[str, list] = {of: [] for of in subsets}
    for i in range(launches):
        champ.append(measure(champion, f"tabbyapi/champion/{i}"))
        for of, subset in subsets.items():
            runs[of].append(measure(subset, f"{labels[of]}/{i}"))
    champ = [x for x in champ if x and x.missing(ranked) is None]
    done = {of: [x for x in launched if x and x.missing(ranked) is None] for of, launched in runs.items()}
    tried = []
    for of, subset in subsets.items():
        cost = judge(champ, done[of], ranked=ranked) if champ and done[of] else None
        tried.append({"of": of, "digest": subset.digest, "config": subset.to_dict(),
                      "cost": cost.to_dict() if cost else None})
    best, chosen = tried[0], "the minimal champion's: no other subset"
    if len(tried) > 1 and done["minimal"] and done["champion"]:
        versus = judge(done["minimal"], done["champion"], ranked=ranked, claim=FASTER)  # the champion's subset against the minimal's
        words = versus.measure.words(versus.verdict)
        chosen = (f"the confirmed champion's subset is {words} than the minimal champion's: request time "
                  f"{signed_change(versus.request, time=True)}") if versus.ranked_by != ENERGY_RANKED else (
            f"the confirmed champion's subset against the minimal champion's: {words}, energy per request "
            f"{signed_change(versus.energy, time=True)}")
        best = tried[1] if versus.verdict == "faster" else tried[0]
    elif len(tried) > 1 and done["champion"] and not done["minimal"]:
        best, chosen = tried[1], "the minimal champion's subset was never measured"
    return {**best, "tried": tried, "chosen": chosen}


def record_gate(study: optuna.Study, *, passed: bool, reason: str, decision_id: int | None = None,
                of: str = "minimal", judged: bool = True) -> dict:
    """Store a gate verdict (autoresearch.champion.minimal_gate judges like any candidate; its decision row is
    `decision_id`) with the minimization, with the digest of the configuration it judged: of the minimal
    champion, which export writes once passed, or (`of="tabbyapi_subset"`) of the subset TabbyAPI runs, which
    export states. `judged=False`: the gate was not run (the configuration cannot be exported), and why.
    Returns the verdict as stored.

    Raises:
        ValueError: the study has no minimization (or no TabbyAPI subset) to record a verdict for.
    """
    stored = study.user_attrs.get(MINIMIZATION_ATTR)
    if not stored:
        raise ValueError("the study has no minimal champion: nothing to record a gate verdict for")
    stored = dict(stored)
    verdict = {"passed": passed, "reason": reason} | ({"decision_id": decision_id} if decision_id is not None else {}) \
        | ({"judged": False} if not judged else {})
    extra = dict(stored.get("extra", {}))
    if of == "tabbyapi_subset":
        if not extra.get("tabbyapi_subset"):
            raise ValueError("the minimization measured no TabbyAPI subset: nothing to record a gate verdict for")
        verdict |= {"digest": extra["tabbyapi_subset"]["digest"]}
        extra["tabbyapi_subset"] = {**extra["tabbyapi_subset"], "gate": verdict}
    else:
        extra["gate"] = verdict = verdict | {"digest": ServingConfig.from_dict(stored["minimal"]).digest}
    stored["extra"] = extra
    study.set_user_attr(MINIMIZATION_ATTR, stored)
    return verdict
