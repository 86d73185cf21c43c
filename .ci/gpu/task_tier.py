"""GPU machine, real model: the task tier judges on its own, against the real 0.5B.

Stage `baseline` (one device call): launch exllamav3's defaults, capture the fidelity reference and
its floor, and run the offline suite in full (the reference every candidate is paired with).
Stage `candidates` (the next call, same warm machine): for each candidate, launch it, measure
fidelity and apply the fidelity tier, then run the suite paired with the baseline (the sequential
test stops each taskset as soon as it is clear) and let the task tier decide on its own: the gate is
given the suite evidence alone, which is this check's way of forcing the fidelity tier to pass.
Candidates: the baseline relaunched (lossless: shows the false-rejection side and the run-to-run
share of flips), KV cache 8/8 (KL 1.7e-3) and KV cache 4/4 (KL 2.4, ruinous).

    source .device-kit/setup.sh && python .ci/gpu/task_tier.py baseline|candidates MODEL [--max-tokens N]

Writes $OUT/task-tier.json (appended per stage) and $OUT/task-tier.db (copied from /tmp/task-tier).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sqlite3
import time
from pathlib import Path

from autoresearch.ground.plan import default_probe_config
from eval import EvalStore, GatePolicy, build_probe_set, capture_reference, gate_candidate, measure_fidelity
from eval.decision import baseline_problems
from eval.paths import EvalPaths
from eval.records import SuiteResult
from eval.run_config import Endpoint
from eval.runner import run_suite
from eval.suites import SuiteOverrides, apply_overrides, get_suite
from serving.config import ServingConfig
from serving.launcher import LaunchSpec, free_port, launch

OUT = Path(os.environ.get("OUT", "/tmp/out"))
STATE = Path("/tmp/task-tier")
CANDIDATES = {
    "baseline-relaunched": {},
    "kv8": {"cache_kind": "quant", "cache_k_bits": 8, "cache_v_bits": 8},
    "kv4": {"cache_kind": "quant", "cache_k_bits": 4, "cache_v_bits": 4},
}


COMMON: dict = {}  # what every launch shares (--cache-tokens), baseline and candidates alike


def _serve(model: Path, name: str, args: dict, engine: str = "exllamav3"):
    config = ServingConfig.from_dict({"engine": engine, "args": {**COMMON, **args}})
    return launch(LaunchSpec(model_dir=model, config=config, port=free_port(), log_path=STATE / f"{name}.log"))


def _save(report: dict) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "task-tier.json").write_text(json.dumps(report, indent=1, default=str))
    sqlite3.connect(STATE / "task-tier.db").backup(sqlite3.connect(OUT / "task-tier.db"))


def _summary(suite) -> dict:
    return {t.name: {"tasks": t.tasks, "accuracy": t.accuracy, "reward_mean": t.reward_mean, "failures": t.failures,
                     "truncations": t.truncations, "output_tok_per_s": t.output_tok_per_s,
                     "output_tokens": t.output_tokens} for t in suite.tasksets}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("stage", choices=["baseline", "candidates"])
    parser.add_argument("model", type=Path)
    parser.add_argument("--max-tokens", type=int, default=1024)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--only", action="append", default=[], help="candidates to run (default: all)")
    parser.add_argument("--taskset", action="append", default=[], help="baseline: only these tasksets this call")
    parser.add_argument("--limit", type=int, help="tasks per taskset (a rehearsal on the CPU)")
    parser.add_argument("--engine", default="exllamav3", help="transformers: a CPU rehearsal of the plumbing")
    parser.add_argument("--cache-tokens", type=int, help="every server's cache, so many requests fit at once")
    args = parser.parse_args()
    if args.cache_tokens:
        COMMON["cache_tokens"] = args.cache_tokens
    STATE.mkdir(parents=True, exist_ok=True)
    store = EvalStore(f"sqlite:///{STATE / 'task-tier.db'}")
    report_path = STATE / "task-tier.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    overrides = SuiteOverrides(max_tokens=args.max_tokens, max_concurrent=args.concurrency, limit=args.limit)
    suite = apply_overrides(get_suite("offline"), overrides)
    paths = EvalPaths(STATE / "cache")
    policy = GatePolicy()
    manifest = "real-0.5b-exl3-4.0"
    if args.stage == "baseline":
        # One taskset per call if need be (--taskset): a device call is at most 10 minutes. The parts
        # are joined into one stored suite run once every taskset of the suite has its baseline.
        started = time.monotonic()
        parts = report.setdefault("baseline_parts", {})
        with _serve(args.model, "baseline", {}, args.engine) as server:
            if "reference_id" not in report:
                probes = build_probe_set(default_probe_config(args.engine))
                reference = capture_reference(server.url, probes, store=store, model_manifest_hash=manifest,
                                              label="baseline", replace=True)
                floor = measure_fidelity(server.url, reference, store=store, role="noise_floor", label="baseline#same")
                report.update(reference_id=reference.reference_id, floor_measurement_id=floor.measurement_id)
            for spec in suite.tasksets:
                if spec.name in parts or (args.taskset and spec.name not in args.taskset):
                    continue
                one = dataclasses.replace(overrides, tasksets=(spec.name,))
                t0 = time.monotonic()
                run = run_suite(apply_overrides(suite, SuiteOverrides(tasksets=(spec.name,))),
                                Endpoint(url=server.url), store=store,
                                label=f"baseline:{spec.name}", model_manifest_hash=manifest, overrides=one,
                                paths=paths, run_dir=STATE / "runs" / f"baseline-{spec.name}")
                parts[spec.name] = {"suite_run_id": run.suite_run_id, "suite_s": round(time.monotonic() - t0, 1)}
                report_path.write_text(json.dumps(report, indent=1, default=str))
        if all(spec.name in parts for spec in suite.tasksets):
            tasksets = tuple(store.load_suite_result(parts[spec.name]["suite_run_id"]).taskset(spec.name)
                             for spec in suite.tasksets)
            base = SuiteResult(suite=suite.name, run_dir=str(STATE / "runs"), tasksets=tasksets)
            run_id = store.save_suite_result(base, label="baseline", base_url="", plan=dataclasses.asdict(suite),
                                             provenance={"joined_from": parts}, model_manifest_hash=manifest)
            problems = [p for t in tasksets for p in baseline_problems(t, policy.tasks, len(tasksets))]
            report["baseline"] = {"suite_run_id": run_id, "floor_measurement_id": report["floor_measurement_id"],
                                  "tasksets": _summary(base), "problems": problems, "max_tokens": args.max_tokens,
                                  "concurrency": args.concurrency}
        report["baseline_call_s"] = round(time.monotonic() - started, 1)
        report_path.write_text(json.dumps(report, indent=1, default=str))
        _save(report)
        print(json.dumps({k: v for k, v in report.items() if k.startswith("baseline")}, indent=1, default=str))
        return 0

    base = store.load_suite_result(report["baseline"]["suite_run_id"])
    reference = store.load_reference(manifest, build_probe_set(default_probe_config(args.engine)).digest)
    floor_id = report["baseline"]["floor_measurement_id"]
    from eval.fidelity import FidelityMeasurement

    floor = FidelityMeasurement(measurement_id=floor_id, role="noise_floor", label="baseline#same",
                                metrics=store.load_measurement(floor_id), per_probe=(), elapsed_s=0.0)
    for name, changes in CANDIDATES.items():
        if args.only and name not in args.only:
            continue
        started = time.monotonic()
        with _serve(args.model, name, changes, args.engine) as server:
            fidelity = measure_fidelity(server.url, reference, store=store, role="candidate", label=name)
            by_fidelity = gate_candidate(store, model_manifest_hash=manifest, candidate_label=name + ":fidelity",
                                         baseline_label="baseline", policy=policy, floor=floor,
                                         candidate_fidelity=fidelity)
            t0 = time.monotonic()
            cand = run_suite(suite, Endpoint(url=server.url), store=store, label=name,
                             model_manifest_hash=manifest, overrides=overrides, paths=paths,
                             run_dir=STATE / "runs" / name, paired_with=base, policy=policy.tasks)
            suite_s = time.monotonic() - t0
        by_tasks = gate_candidate(store, model_manifest_hash=manifest, candidate_label=name + ":tasks-only",
                                  baseline_label="baseline", policy=policy, baseline_suite=base, candidate_suite=cand)
        report[name] = {
            "changes": changes,
            "fidelity": {"kl_mean": fidelity.metrics.kl_mean, "kl_p99": fidelity.metrics.kl_p99,
                         "top1_agreement": fidelity.metrics.top1_agreement, "passed": by_fidelity.decision.passed,
                         "reasons": by_fidelity.decision.reasons},
            "tasks_only": {"passed": by_tasks.decision.passed, "reasons": by_tasks.decision.reasons,
                           "verdicts": [dataclasses.asdict(v) | {"unpaired_tasks": len(v.unpaired_tasks)}
                                        for v in by_tasks.decision.tasksets]},
            "suite_s": round(suite_s, 1), "total_s": round(time.monotonic() - started, 1),
            "tasksets": _summary(cand),
        }
        report_path.write_text(json.dumps(report, indent=1, default=str))
        _save(report)
        print(name, json.dumps(report[name], default=str)[:3000], flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
