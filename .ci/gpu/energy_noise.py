"""GPU machine, after a study: energy per request for every configuration, and its launch-to-launch noise
beside that of request time (issue 41). Reads results.db; prints the tables; writes $OUT/energy-noise.json.

    python .ci/gpu/energy_noise.py /tmp/energy-study/results.db

Every configuration: its search launch's request time and joules per request on the study's workload,
answer tokens per joule, how the energy was measured and the power-capped share. Noise: each
configuration launched more than once (the baseline's two launches, each finalist's round) gives the
spread of T and of J between its launches, and the baseline's per-point floor (bench.stats.noise_floor)
on the speeds and on tokens per joule: the floor a ranking by energy (phase 2) would judge with.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import optuna

from autoresearch.ground.db import ResultsDB
from autoresearch.ground.errors import Unmeasured
from autoresearch.measures.ranking import Ranking
from autoresearch.measures.request_time import RequestMix
from bench import BenchResult, noise_floor

OUT = Path(os.environ.get("OUT", "/tmp/out"))


def _or_none(f, *args, why: set[str] | None = None) -> float | None:
    try:
        return f(*args)
    except Unmeasured as exc:
        if why is not None:
            why.add(str(exc))
        return None


def _spread(values: list[float | None]) -> float | None:
    """max / min - 1 over the launches (None where any launch is unmeasured)."""
    if len(values) < 2 or any(v is None for v in values):
        return None
    return max(values) / min(values) - 1


def main(db_path: Path) -> dict:
    url = f"sqlite:///{db_path}"
    (name,) = optuna.get_all_study_names(url)
    study = optuna.load_study(study_name=name, storage=url)
    db = ResultsDB(url)
    baseline = next(t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("role") == "baseline")
    searched = db.measurements(study=name, kind="bench")
    mix = Ranking.of(study).mix or RequestMix.from_record(
        next(r["payload"] for r in searched if r["trial"] == baseline.number and r["launch"] == 0))
    groups: dict[str, list[dict]] = {}
    for r in searched:
        groups.setdefault(f"search trial {r['trial']}", []).append(r["payload"])
    for r in db.measurements(study=name, kind="finalist_bench"):
        groups.setdefault(f"round {r['payload']['round']} trial {r['payload']['trial']}", []).append(r["payload"])

    rows = []
    for label, payloads in groups.items():
        times = [_or_none(mix.time_s, p.get("headline") or {}) for p in payloads]
        why: set[str] = set()
        joules = [_or_none(mix.energy_j, p.get("energy") or {}, why=why) for p in payloads]
        power = [p.get("power") or {} for p in payloads]
        why |= {"no GPU telemetry in the bench record" for p in power if not p}
        rows.append({
            "config": label, "launches": len(payloads), "time_s": times, "j_per_request": joules,
            "answer_tok_per_j": [mix.answer_tokens / j if j else None for j in joules],
            "methods": [p.get("energy_methods") for p in power],
            "unmeasured": sorted(why | {u for p in power for u in p.get("energy_unmeasured") or ()}),
            "power_limit_w": [p.get("power_limit_w") for p in power],
            "power_capped_share": [p.get("power_capped_share") for p in power],
            "time_spread": _spread(times), "energy_spread": _spread(joules),
        })
    base = [r["payload"] for r in searched if r["trial"] == baseline.number]
    floors = {}
    if len(base) >= 2:
        a, b = (BenchResult.from_dict(p) for p in base[:2])
        floors = {"speed": dict(noise_floor(a.samples(), b.samples()).rel_diff),
                  "energy": dict(noise_floor(a.energy_samples(), b.energy_samples()).rel_diff)}
    return {"study": name, "mix": mix.to_dict(), "rows": rows, "baseline_floor": floors}


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def show(report: dict) -> None:
    print(f"study {report['study']}")
    print(f"{'configuration':<22} {'launch':>6} {'T s/request':>12} {'J/request':>10} {'answer tok/J':>12} "
          f"{'capped':>7} {'limit W':>8}  method")
    for r in report["rows"]:
        for i in range(r["launches"]):
            print(f"{r['config']:<22} {i:>6} {_fmt(r['time_s'][i], '.3f'):>12} {_fmt(r['j_per_request'][i], '.1f'):>10} "
                  f"{_fmt(r['answer_tok_per_j'][i], '.3f'):>12} {_fmt(r['power_capped_share'][i], '.0%'):>7} "
                  f"{_fmt(r['power_limit_w'][i], '.0f'):>8}  {r['methods'][i]}")
        if r["unmeasured"]:
            print(f"{'':<22} energy unmeasured: {'; '.join(r['unmeasured'])}")
    print("\nlaunch-to-launch spread (max/min - 1) of request time and of energy per request:")
    for r in report["rows"]:
        if r["launches"] > 1:
            print(f"  {r['config']:<22} time {_fmt(r['time_spread'], '.2%'):>7}   energy {_fmt(r['energy_spread'], '.2%'):>7}")
    for kind, floor in report["baseline_floor"].items():
        print(f"\nbaseline's two launches, per-point floor on {kind}:")
        for metric, v in sorted(floor.items()):
            print(f"  {metric:<40} {v:.2%}")


if __name__ == "__main__":
    report = main(Path(sys.argv[1]))
    show(report)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "energy-noise.json").write_text(json.dumps(report, indent=1) + "\n")
    measured = [j for r in report["rows"] for j in r["j_per_request"]]
    print(f"\n{sum(j is not None for j in measured)} of {len(measured)} launches have a joules-per-request value")
