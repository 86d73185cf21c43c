"""GPU machine, real model (issue #27): each single lever alone, and the loop's champion, by request time.

    source .device-kit/setup.sh && python .ci/gpu/lever_table.py /tmp/real-model/exl3-4.0 /tmp/lever-study/results.db

Reads the study (its bench plan, its request mix, its champion), takes the catalog's levers for the
model (SearchSpace.levers: each drafting mode the checkpoint allows, each prefill chunk size, one
change each on the defaults), and measures the defaults, each lever and the champion in fresh
launches on the study's own bench plan, ROUNDS times interleaved (default 2). Prints each setting's
request-time speed-up over the defaults as the finalists take it (each launch's request time, the ratio
of the medians, with its interval), and decode and prefill (each rate's median over the rounds),
the best single lever, the champion, and champion / best single lever (the issue's bar: at least
0.95). Writes $OUT/lever-table.json and every bench record. ONLY=a,b measures those settings only
(defaults always); STUDY names the study when the database holds several; DRAFTER=DIR gives the
catalog a draft model (the study's --draft-model). The engine is the study's, so a CPU-engine study
runs it on the CPU (tests/autoresearch/test_lever_table.py).
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import statistics
import sys
from pathlib import Path

import optuna

from autoresearch.crown.finalists import load_champion
from autoresearch.ground.errors import Unmeasured
from autoresearch.measures.launch_costs import ratio
from autoresearch.measures.objectives import objectives_from_bench
from autoresearch.measures.ranking import Ranking
from autoresearch.measures.request_time import RequestMix
from bench import BenchPlan, BenchResult, Workload, run_bench
from openai_client import Endpoint
from search_space import SpaceContext, build_space, read_model_info
from serving.config import ServingConfig
from serving.launcher import LaunchSpec, free_port, launch

OUT = Path(os.environ.get("OUT", "/tmp/out"))


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    model, db = Path(sys.argv[1]), Path(sys.argv[2])
    storage = f"sqlite:///{db.resolve()}"
    names = optuna.get_all_study_names(storage)
    study = optuna.load_study(study_name=os.environ.get("STUDY") or _only(names), storage=storage)
    engine = study.user_attrs["engine"]
    plan = BenchPlan.from_dict(study.user_attrs["bench_plan"])
    workload = Workload.load(Path(os.environ["WORKLOAD"])) if plan.workload else None
    if workload is not None and workload.sha256 != plan.workload["sha256"]:
        print(f"WORKLOAD is not the study's workload {plan.workload['name']}", file=sys.stderr)
        return 2
    settings = _settings(model, engine, study)
    if only := os.environ.get("ONLY"):
        settings = {k: v for k, v in settings.items() if k == "defaults" or k in only.split(",")}
    OUT.mkdir(parents=True, exist_ok=True)
    records: dict[str, list[BenchResult]] = {name: [] for name in settings}
    errors: dict[str, list[str]] = {name: [] for name in settings}
    for round_ in range(int(os.environ.get("ROUNDS", "2"))):
        for name, config in settings.items():  # interleaved, so drift hits every setting alike
            try:
                result = _measure(model, config, plan, workload, f"{name}-{round_}")
            except Exception as exc:  # one setting that fails must not hide the others
                errors[name].append(f"round {round_}: {type(exc).__name__}: {exc}")
                continue
            (OUT / f"bench-{name}-{round_}.json").write_text(json.dumps(result.to_dict()))
            records[name].append(result)
    table = _table(study, settings, records, errors)
    (OUT / "lever-table.json").write_text(json.dumps(table, indent=1))
    _print(table)
    return 0


def _only(names: list[str]) -> str:
    if len(names) != 1:
        raise SystemExit(f"the database holds studies {names}: name one with STUDY=")
    return names[0]


def _settings(model: Path, engine: str, study: optuna.Study) -> dict[str, ServingConfig]:
    """The defaults, each single lever of the catalog for this model, and the study's champion."""
    drafter = os.environ.get("DRAFTER")
    space = build_space(SpaceContext(engine=engine, model=read_model_info(model), cpu_count=os.cpu_count() or 1,
                                     draft_model=read_model_info(Path(drafter)) if drafter else None))
    settings = {"defaults": space.baseline_config()}
    for lever in space.levers():
        (knob, value), = lever.items()
        settings[f"{knob}={value}"] = space.to_config(space.values_with(lever))
    champion = load_champion(study)
    if champion is not None and not champion["is_baseline"]:
        settings["champion"] = ServingConfig.from_dict(champion["config"])
    return settings


def _measure(model: Path, config: ServingConfig, plan: BenchPlan, workload: Workload | None, tag: str) -> BenchResult:
    spec = LaunchSpec(model_dir=model, config=config, port=free_port(), log_path=Path(f"/tmp/lever-table/{tag}.log"))
    with launch(spec) as server:
        return run_bench(dataclasses.replace(plan, salt=secrets.token_hex(4)), Endpoint(url=server.url),
                         workload=workload)


def _measured(results: list[BenchResult]) -> list[BenchResult]:
    """The launches that measured every objective point (as the finalists' rule counts them)."""
    out = []
    for r in results:
        try:
            objectives_from_bench(r)
        except Unmeasured:
            continue
        out.append(r)
    return out


def _times(mix: RequestMix, runs: list[BenchResult]) -> list[float]:
    """Each launch's request time on the workload (a launch that misses a rate the mix needs is left out)."""
    times = []
    for r in runs:
        try:
            times.append(mix.time_s(r.headline()))
        except Unmeasured:
            continue
    return times


def _table(study: optuna.Study, settings: dict, records: dict[str, list[BenchResult]], errors: dict) -> dict:
    base = _measured(records["defaults"])
    if not base:
        return {"error": "the defaults were not measured in any launch: nothing to compare with", "errors": errors}
    mix = Ranking.of(study).mix or RequestMix.from_bench(base[0])
    base_times = _times(mix, base)
    base_values = [statistics.median(v) for v in zip(*(objectives_from_bench(r) for r in base), strict=True)]
    rows = []
    for name, config in settings.items():
        runs = _measured(records[name])
        row = {"setting": name, "config": config.to_dict(), "launches": len(runs), "errors": errors[name]}
        if runs:
            values = [statistics.median(v) for v in zip(*(objectives_from_bench(r) for r in runs), strict=True)]
            speed = ratio(base_times, _times(mix, runs))  # each launch's request time, as the finalists judge
            request = None if speed is None else speed.speedup
            if speed is None:
                row["unmeasured"] = "no launch of it (or of the defaults) measured the workload's request time"
            else:
                row["request_interval"] = [speed.low, speed.high]
            row |= {"decode_tok_per_s": values[0], "prefill_tok_per_s": values[1], "request_speedup": request,
                    "decode_speedup": values[0] / base_values[0], "prefill_speedup": values[1] / base_values[1]}
        rows.append(row)
    singles = [r for r in rows if r["setting"] not in ("defaults", "champion") and r.get("request_speedup")]
    best = max(singles, key=lambda r: r["request_speedup"], default=None)
    champion = next((r for r in rows if r["setting"] == "champion" and r.get("request_speedup")), None)
    over_best = champion["request_speedup"] / best["request_speedup"] if champion and best else None
    return {"study": study.study_name, "mix": mix.to_dict(), "assumed": mix.describe_assumed(), "rows": rows,
            "best_single": best["setting"] if best else None, "champion_over_best_single": over_best,
            "champion_within_5pct": None if over_best is None else over_best >= 0.95}


def _print(table: dict) -> None:
    if "rows" not in table:
        print(json.dumps(table))
        return
    print("| setting | launches | request time | decode | prefill | decode tok/s | prefill tok/s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in table["rows"]:
        interval = r.get("request_interval")
        request = _x(r.get("request_speedup")) + (f" [{interval[0]:.3f}, {interval[1]:.3f}]" if interval and None not in interval else "")
        cells = [request, _x(r.get("decode_speedup")), _x(r.get("prefill_speedup")),
                 _n(r.get("decode_tok_per_s"), 1), _n(r.get("prefill_tok_per_s"), 0)]
        print(f"| {r['setting']} | {r['launches']} | " + " | ".join(cells) + " |")
    if table["assumed"]:
        print(f"answer lengths assumed: {table['assumed']}")
    print(f"best single lever: {table['best_single']}; champion / best single lever: "
          f"{_x(table['champion_over_best_single'])} (within 5%: {table['champion_within_5pct']})")


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}x"


def _n(v: float | None, digits: int) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


if __name__ == "__main__":
    sys.exit(main())
