"""Decode per kind for RESULTS.md: the baseline and the champion on each decode point, with its weight.

The decode objective is a weighted geometric mean over the workload's kinds (autoresearch.measures.objectives);
a champion faster on the mix may be slower on one kind, and drafting gains depend on the text, so the
report shows each point. Numbers come from the finalists' fresh launches (the round that confirmed the
champion: each launch's median, then over the launches as the decision's estimator takes them,
autoresearch.measures.launch_stats.geometric_cost, and the ratio by the same estimator) or, before any round, from the
search launch of each trial. Acceptance is the champion's pooled draft acceptance at that point. The
baseline's answer length says whether fixed-length runs timed its answers or the text after them.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from autoresearch.ground.db import ResultsDB
from autoresearch.measures.launch_costs import ratio
from autoresearch.measures.launch_stats import Reading, geometric_cost
from autoresearch.measures.objectives import DECODE_RATE
from bench.metrics import Metric

__all__ = ["DecodeByKind", "KindRow", "read_decode_by_kind"]


@dataclass(frozen=True)
class KindRow:
    kind: str
    context: int
    weight: float  # the point's share of the decode objective
    baseline: float | None  # tok/s, client-timed
    champion: float | None
    acceptance: float | None  # the champion's, None where it does not draft
    # the median length of the baseline's own answers here (bench's warm-ups run to its end of
    # sequence); None in records made before bench kept it
    answer_tokens: float | None = None
    ratio: float | None = None  # champion / baseline by the decision's estimator over the same launches


@dataclass(frozen=True)
class DecodeByKind:
    workload: str  # what decode was measured on
    source: str  # which launches the numbers come from
    champion_trial: int | None
    rows: list[KindRow]
    decode_tokens: int | None = None  # each run's length: exactly, or at most with until_eos
    until_eos: bool = False  # runs timed the model's own answers (bench's decode_until "eos")

    @property
    def past_answer(self) -> list[KindRow]:
        """Points whose fixed-length runs went on past the baseline's answers: decode there is timed
        mostly on text after the answer, which drafting predicts far better than an answer."""
        if self.until_eos or self.decode_tokens is None:
            return []
        return [r for r in self.rows if r.answer_tokens is not None and r.answer_tokens < self.decode_tokens]


def read_decode_by_kind(db: ResultsDB, study_name: str, bench_plan: dict, baseline_trial: int,
                        champion_trial: int | None) -> DecodeByKind | None:
    """None when there is nothing per kind to show (no baseline measurement)."""
    finals = [r["payload"] for r in db.measurements(study=study_name, kind="finalist_bench")]
    rounds = sorted({p["round"] for p in finals if p["trial"] == champion_trial}) if champion_trial is not None else []
    if rounds:
        chosen = [p for p in finals if p["round"] == rounds[-1]]
        base = [p for p in chosen if p["trial"] == baseline_trial]
        champ = [p for p in chosen if p["trial"] == champion_trial]
        source = f"finalists' fresh launches, round {rounds[-1]} ({len(base)} baseline, {len(champ)} champion)"
    else:
        base, champ = _search(db, study_name, baseline_trial), _search(db, study_name, champion_trial)
        source = ("search launches (one each)" if champion_trial is not None
                  else "baseline's search launch (no candidate is the champion)")
    if not base:
        return None
    workload = bench_plan.get("workload") or {}
    shares = workload.get("weights") or {}
    metrics = [m for k in base[-1].get("headline", {}) if (m := Metric.parse(k)).rate == DECODE_RATE]
    raw = {str(m): shares.get(m.kind, 1.0) for m in metrics}
    total = sum(raw.values()) or 1.0
    rows = [KindRow(kind=m.kind, context=m.tokens, weight=raw[str(m)] / total, baseline=_rate(base, str(m)),
                    champion=_rate(champ, str(m)),
                    acceptance=_median(champ, "acceptance", str(Metric.decode("spec_acceptance", m.tokens, m.kind))),
                    answer_tokens=_median(base, "answers", str(Metric.decode("answer_tokens", m.tokens, m.kind))),
                    ratio=_ratio(base, champ, str(m)))
            for m in metrics]
    label = (f"workload `{workload['name']}` (sha256 {workload['sha256'][:12]})" if workload
             else "bench's corpus (`--bench-workload corpus`)")
    return DecodeByKind(workload=label, source=source, champion_trial=champion_trial, rows=rows,
                        decode_tokens=bench_plan.get("decode_tokens"),
                        until_eos=bench_plan.get("decode_until") == "eos")


def _search(db: ResultsDB, study_name: str, trial: int | None) -> list[dict]:
    if trial is None:
        return []
    rows = [r["payload"] for r in db.measurements(study=study_name, kind="bench", trial=trial) if r["launch"] == 0]
    return rows[:1]


def _costs(payloads: list[dict], key: str) -> list[float]:
    """Each launch's seconds per token at this point (1 / its rate), as the estimator takes a launch's cost."""
    return [1 / v for p in payloads if (v := (p.get("headline") or {}).get(key))]


def _rate(payloads: list[dict], key: str) -> float | None:
    costs = _costs(payloads, key)
    return 1 / geometric_cost([Reading(c) for c in costs]) if costs else None


def _ratio(base: list[dict], champ: list[dict], key: str) -> float | None:
    verdict = ratio(_costs(base, key), _costs(champ, key))
    return None if verdict is None else verdict.speedup


def _median(payloads: list[dict], field: str, key: str) -> float | None:
    values = [v for p in payloads if (v := (p.get(field) or {}).get(key)) is not None]
    return statistics.median(values) if values else None
