"""Energy per request on the workload, beside request time: what a configuration costs the user's card.

bench measures each run's joules (bench.energy) and keeps, per point, tokens per joule over the valid
runs, shaped as the speeds are (`BenchResult.energy_headline()`, "decode_tok_per_j@1024/math").
`RequestMix.energy_j` turns them into joules per request on the workload by the request-time sum
with tokens per joule in place of tokens per second; answer tokens per joule is the workload's mean
answer over it. The GPU runs under the user's own power limit: the project never changes it or the
clocks, so the enforced limit and the share of time NVML reported sw_power_cap are shown beside.

Each measured trial stores these as user attributes (optuna-dashboard shows them) and its energy
headline (`ENERGY_RATES`, as `ranking.RATES` stores speeds); RESULTS.md's energy table reads the
stored bench records (`read_energy`): a configuration of several launches (a finalist) is each launch's
joules per request, and their median, the finalists' decision's own estimator (autoresearch.measures.faster;
autoresearch.measures.launch_costs). Unmeasured energy is None with a reason, never 0.

--rank-by energy (autoresearch.measures.ranking) reuses this shape: `BenchResult.energy_samples()` feeds
bench.stats' noise_floor and compare exactly as samples() does, and the trials' `energy_rates` rank.

Usage:
    record_energy(trial, result, mix)                       # user attrs of a measured trial
    EnergyUse.of(mix, [payload, ...])                       # one configuration's stored launches
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import optuna

from autoresearch.ground.db import ResultsDB
from autoresearch.ground.errors import Unmeasured
from autoresearch.measures.faster import ENERGY
from autoresearch.measures.launch_costs import finalist_launches, ratio
from autoresearch.measures.launch_stats import Reading, geometric_cost
from autoresearch.measures.request_time import RequestMix
from bench import BenchResult

__all__ = ["ENERGY_RATES", "EnergyReport", "EnergyRow", "EnergyUse", "read_energy", "record_energy"]

ENERGY_RATES = "energy_rates"  # a measured trial's user attr: tokens per joule per point, as energy_headline() keys them


@dataclass(frozen=True)
class EnergyUse:
    """One configuration's energy on the workload, from one or more launches' bench records."""

    j_per_request: float | None
    unmeasured: str | None  # why j_per_request is None
    answer_tok_per_j: float | None = None
    power_limit_w: float | None = None
    power_capped_share: float | None = None  # of the sampled time, summed over the launches
    sampled_s: float = 0.0
    methods: dict[str, int] = field(default_factory=dict)  # runs per energy method ("unmeasured" too)
    launch_j: tuple[float, ...] = ()  # each launch's joules per request, of the launches that read energy

    @classmethod
    def of(cls, mix: RequestMix | None, payloads: list[dict]) -> EnergyUse:
        """From stored bench records (BenchResult.to_dict()) of one configuration: each launch's joules per
        request, and their geometric mean as the decision takes it (autoresearch.measures.faster.geometric_cost), over
        the launches whose energy covers the mix; never each point's median over the launches first."""
        powers = [p["power"] for p in payloads if p.get("power")]
        sampled = sum(p["sampled_s"] for p in powers)
        limits = [p["power_limit_w"] for p in powers if p.get("power_limit_w") is not None]
        methods = Counter()
        for p in powers:
            methods.update(p.get("energy_methods") or {})
        power = {"power_limit_w": max(limits) if limits else None, "sampled_s": sampled, "methods": dict(methods),
                 "power_capped_share": sum(p["power_capped_s"] for p in powers) / sampled if sampled > 0 else None}
        if mix is None:
            return cls(None, "no request mix: the baseline has not been measured", **power)
        if not payloads:
            return cls(None, "no bench record", **power)
        if not powers:
            return cls(None, "no GPU telemetry in its bench records (no NVML, or recorded before bench measured energy)",
                       **power)
        launch_j, reasons = [], []
        for p in payloads:
            try:
                launch_j.append(mix.energy_j(p.get("energy") or {}))
            except Unmeasured as exc:
                reasons.append(str(exc))
        if not launch_j:
            why = sorted({r for p in powers for r in p.get("energy_unmeasured") or ()})
            return cls(None, "; ".join([reasons[0], *why]), **power)
        joules = geometric_cost([Reading(j) for j in launch_j])
        return cls(joules, None, answer_tok_per_j=mix.answer_tokens / joules, launch_j=tuple(launch_j), **power)

    def vs(self, baseline: EnergyUse | None) -> float | None:
        """J(this) / J(baseline): below 1, this configuration spends less energy per request."""
        if baseline is None or not self.j_per_request or not baseline.j_per_request:
            return None
        return self.j_per_request / baseline.j_per_request


def record_energy(trial: optuna.Trial, result: BenchResult, mix: RequestMix) -> EnergyUse:
    """A measured trial's energy as user attributes, where optuna-dashboard shows them beside its speed."""
    use = EnergyUse.of(mix, [result.to_dict()])
    trial.set_user_attr(ENERGY_RATES, result.energy_headline())
    trial.set_user_attr("energy_j_per_request", use.j_per_request)
    trial.set_user_attr("answer_tok_per_j", use.answer_tok_per_j)
    trial.set_user_attr("power_limit_w", use.power_limit_w)
    trial.set_user_attr("power_capped_share", use.power_capped_share)
    if use.unmeasured:
        trial.set_user_attr("energy_unmeasured", use.unmeasured)
    return use


@dataclass(frozen=True)
class EnergyRow:
    label: str  # "champion (trial 7)", "finalist round 1, trial 7", "front, trial 7"
    request_speedup: float | None  # the request-time speed-up the report shows for it elsewhere
    use: EnergyUse
    vs_baseline: float | None


@dataclass(frozen=True)
class EnergyReport:
    baseline: EnergyUse  # the baseline's search launch
    rows: list[EnergyRow]
    power_limit_w: float | None  # the highest enforced limit any bench of the study saw
    power_limit_w_min: float | None  # below it: the user changed the limit during the study
    power_capped_share: float | None  # over every bench of the study
    launches: int
    champion: EnergyRow | None = None  # the champion's row (also rows[0]): RESULTS.md's champion says its energy


def read_energy(db: ResultsDB, study_name: str, mix: RequestMix | None, baseline_trial: int | None,
                front: list, finalists: list, champion, *, by_energy: bool = False) -> EnergyReport | None:
    """The energy table: the champion, the finalists (their round's launches the decision counted, against
    the baseline's launches of that round, by judge_speed's ratio: the decision's own when `by_energy`)
    and the front (search launches, against the baseline's); None before a baseline."""
    if baseline_trial is None:
        return None
    search = {r["trial"]: r["payload"] for r in db.measurements(study=study_name, kind="bench")
              if r["launch"] == 0 and r["trial"] is not None}
    launched = db.measurements(study=study_name, kind="finalist_bench")
    rounds = finalist_launches(launched, mix, by_energy=by_energy)
    base = EnergyUse.of(mix, [search[baseline_trial]] if baseline_trial in search else [])

    def counted(round_: int, trial: int) -> EnergyUse:
        launches = rounds.get((round_, trial))
        return EnergyUse.of(mix, list(launches.payloads) if launches else [])

    def finalist(round_: int, trial: int) -> tuple[EnergyUse, float | None]:
        use, reference = counted(round_, trial), counted(round_, baseline_trial)
        gain = ratio(reference.launch_j, use.launch_j, ENERGY)  # E(baseline) / E(it), as the decision takes it
        return use, None if gain is None else 1 / gain.speedup

    rows, champion_row = [], None
    if champion is not None:
        trial = baseline_trial if champion.trial is None else champion.trial
        last = max((r for r in finalists if r.trial == trial), key=lambda r: r.round, default=None)
        use, vs = finalist(last.round, trial) if last else (base, 1.0)
        champion_row = EnergyRow(f"champion ({champion.who})", champion.request_speedup, use, vs)
        rows.append(champion_row)
    for r in finalists:
        use, vs = finalist(r.round, r.trial)
        rows.append(EnergyRow(f"finalist: round {r.round}, trial {r.trial}", r.request_speedup, use, vs))
    for r in front:
        use = EnergyUse.of(mix, [search[r.trial]] if r.trial in search else [])
        rows.append(EnergyRow(f"front: trial {r.trial}", r.request_ratio, use, use.vs(base)))
    powers = [p["power"] for p in (*search.values(), *(r["payload"] for r in launched)) if p.get("power")]
    sampled = sum(p["sampled_s"] for p in powers)
    limits = [p["power_limit_w"] for p in powers if p.get("power_limit_w") is not None]
    return EnergyReport(baseline=base, rows=rows, power_limit_w=max(limits, default=None),
                        power_limit_w_min=min(limits, default=None),
                        power_capped_share=sum(p["power_capped_s"] for p in powers) / sampled if sampled else None,
                        launches=len(powers), champion=champion_row)
