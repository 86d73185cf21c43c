"""The Python half of .ci/gpu/tabby-compare.sh (issue #29): TabbyAPI against this project's server.

    python .ci/gpu/tabby_compare.py prepare WORK DB STUDY MODEL PORT   # after both exports into WORK
    python .ci/gpu/tabby_compare.py wait URL PID SECONDS                # /health answers 200, or the server died
    python .ci/gpu/tabby_compare.py check-tabby URL WORK/tabby-config.yml  # TabbyAPI loaded what config.yml says
    python .ci/gpu/tabby_compare.py table WORK DB STUDY OUT             # the table, from WORK/bench-ARM-N.json

`prepare` reads WORK/tabby-export (`export --format tabbyapi`) and WORK/champion.json (`export --format
serving`, the same champion), writes WORK/tabby-config.yml (the export with only its deployment keys
changed: model folder, host/port, auth off, no prompt logging), WORK/subset.json when TabbyAPI cannot
express the champion (this project's server running exactly what TabbyAPI runs) and WORK/bench-args (the
study's own bench plan as `python -m bench` flags). Request time is the study's request mix (its prompts
and answers) with the client-timed prefill rate on every side: TabbyAPI reports no server timings.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import urllib.request
from pathlib import Path

import optuna
import yaml

from autoresearch.champion.change_costs import MINIMIZATION_ATTR
from autoresearch.champion.tabbyapi import expressible_subset, to_tabbyapi
from autoresearch.ground.study import model_is_hybrid
from autoresearch.measures.request_time import RequestMix
from bench import BenchPlan, BenchResult
from serving.config import ServingConfig

ARMS = {"tabby": "TabbyAPI (exported config.yml + exl3.env)", "ours": "this project's server (exported champion)",
        "subset": "this project's server, TabbyAPI's subset"}
DECODE, PREFILL = "decode_tok_per_s_client", "prefill_tok_per_s_client"
# config.yml keys that say where and how to serve, not what is measured: the only ones `deploy` may set
DEPLOYMENT = {"model": {"model_dir", "model_name"}, "network": None, "logging": None}


def deploy(tree: dict, model: Path, port: int) -> dict:
    """The exported config.yml tree with its deployment keys set for this machine; every measured knob as exported."""
    out = json.loads(json.dumps(tree))
    out["model"] |= {"model_dir": str(model.parent), "model_name": model.name}
    out["network"] = {"host": "127.0.0.1", "port": port, "disable_auth": True, "api_servers": ["oai"]}
    out["logging"] = {"log_prompt": False, "log_generation_params": False, "log_requests": False,
                      "log_chat_completion_requests": False}
    for section in set(tree) | set(out):
        keep = DEPLOYMENT.get(section, set())
        if keep is None:
            continue
        before, after = ({k: v for k, v in t.get(section, {}).items() if k not in keep} for t in (tree, out))
        assert before == after, f"deploy changed a measured key of {section}: {before} -> {after}"
    return out


def bench_args(plan: BenchPlan, workload: str | None) -> list[str]:
    """The study's bench plan as `python -m bench` flags (salt, GPU and extra body are the run's own)."""
    args = ["--prefill", ",".join(map(str, plan.prefill_tokens)), "--decode",
            ",".join(map(str, plan.decode_context_tokens)) or "none", "--decode-kinds", ",".join(plan.decode_kinds),
            "--decode-tokens", str(plan.decode_tokens), "--decode-until", plan.decode_until,
            "--decode-min-tokens", str(plan.decode_min_tokens), "--repeats", str(plan.min_repeats),
            "--max-repeats", str(plan.max_repeats), "--warmup", str(plan.warmup_requests),
            "--prefill-target-ci", str(plan.prefill_target_rel_ci), "--decode-target-ci", str(plan.decode_target_rel_ci),
            "--api", plan.api, "--timeout", str(plan.request_timeout_s)]
    if plan.max_cached_tokens is not None:
        args += ["--max-cached-tokens", str(plan.max_cached_tokens)]
    if plan.workload:
        if not workload:
            raise SystemExit(f"the study measured workload {plan.workload['name']}: give its file as WORKLOAD=")
        args += ["--workload", workload]
    return args


def _same_plan(stored: BenchPlan, args: list[str]) -> None:
    """The flags rebuild the stored plan (bench's own parser), apart from what each run sets itself."""
    from bench import Workload
    from bench.__main__ import _measure_parser

    a = _measure_parser().parse_args(["--url", "http://x", *args])
    workload = Workload.load(a.workload) if a.workload else None
    rebuilt = BenchPlan(prefill_tokens=a.prefill, decode_context_tokens=a.decode,
                        decode_kinds=a.decode_kinds, workload=workload.summary() if workload else None,
                        decode_tokens=a.decode_tokens, decode_until=a.decode_until,
                        decode_min_tokens=a.decode_min_tokens, min_repeats=a.repeats, max_repeats=a.max_repeats,
                        warmup_requests=a.warmup, prefill_target_rel_ci=a.prefill_target_ci,
                        decode_target_rel_ci=a.decode_target_ci, max_cached_tokens=a.max_cached_tokens, api=a.api,
                        request_timeout_s=a.timeout, gpu_index=stored.gpu_index, extra_body=stored.extra_body,
                        salt=stored.salt)
    if rebuilt != stored:
        raise SystemExit(f"the bench flags do not rebuild the study's plan:\n  {rebuilt}\n  {stored}")


def strip(tree: dict) -> dict:
    """A config.yml tree without the model's folder (the study's machine and this one may keep it elsewhere)."""
    return {s: {k: v for k, v in keys.items() if k not in ("model_dir", "model_name")} for s, keys in tree.items()}


def _study(db: str, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{Path(db).resolve()}")


def prepare(work: Path, db: str, name: str, model: Path, port: int) -> int:
    study = _study(db, name)
    tree = yaml.safe_load((work / "tabby-export" / "config.yml").read_text())
    (work / "tabby-config.yml").write_text(yaml.safe_dump(deploy(tree, model, port), sort_keys=False))
    champion = ServingConfig.from_json((work / "champion.json").read_text())
    hybrid = model_is_hybrid(study)
    export = to_tabbyapi(champion, model_path=model, hybrid=hybrid)
    # what TabbyAPI runs: the champion's expressible subset, or the one the minimization measured faster
    stored = ((study.user_attrs.get(MINIMIZATION_ATTR) or {}).get("extra") or {}).get("tabbyapi_subset") or {}
    subsets = [expressible_subset(champion, hybrid=hybrid)] + \
        ([ServingConfig.from_dict(stored["config"])] if stored.get("config") else [])
    subset = next((c for c in subsets if strip(to_tabbyapi(c, model_path=model, hybrid=hybrid).config) == strip(tree)),
                  None)
    if subset is None:  # the two exports must be one champion
        raise SystemExit(f"tabby-export/config.yml is no subset of champion.json's champion:\n  {export.config}\n  {tree}")
    if not export.equivalent:  # what TabbyAPI runs, on this project's server: the servers compared on one config
        (work / "subset.json").write_text(subset.to_json() + "\n")
    plan = BenchPlan.from_dict(study.user_attrs["bench_plan"])
    args = bench_args(plan, os.environ.get("WORKLOAD"))
    _same_plan(plan, args)
    (work / "bench-args").write_text(" ".join(args) + "\n")
    print(f"{'equivalent' if export.equivalent else 'not equivalent'}: TabbyAPI "
          f"{'runs the champion' if export.equivalent else 'runs the subset, also measured on our server (subset)'}")
    return 0


def _get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def wait(url: str, pid: int, seconds: float) -> int:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            print(f"server pid {pid} exited before {url}/health answered", file=sys.stderr)
            return 1
        try:
            if _get(url + "/health")[0] == 200:
                return 0
        except OSError:
            pass
        time.sleep(0.5)
    print(f"{url}/health did not answer 200 within {seconds:.0f} s", file=sys.stderr)
    return 1


def check_tabby(url: str, config: Path) -> int:
    """TabbyAPI's /v1/model says it runs config.yml's cache, chunk and batch (a YAML it could not read is logged
    and skipped, not fatal, in TabbyAPI)."""
    status, body = _get(url + "/v1/model")
    card = json.loads(body) if status == 200 else {}
    params, want = card.get("parameters") or {}, yaml.safe_load(config.read_text())["model"]
    print(json.dumps({"v1_model": card}, indent=1))
    wrong = {k: (params.get(k), want[k]) for k in ("cache_size", "cache_mode", "chunk_size", "max_batch_size")
             if params.get(k) != want[k]}
    if status != 200 or wrong:
        print(f"TabbyAPI does not run config.yml: /v1/model {status}, (loaded, config.yml) differ: {wrong}",
              file=sys.stderr)
        return 1
    return 0


def _client_rates(result: BenchResult) -> dict[str, float]:
    """Client-timed rates keyed as request time reads them (its prefill key takes the client-timed rate)."""
    head = result.headline()
    out = {k: v for k, v in head.items() if k.startswith(DECODE + "@")}
    out |= {k.replace(PREFILL, "prefill_tok_per_s_server"): v for k, v in head.items() if k.startswith(PREFILL + "@")}
    return out


def _median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarize(mix: RequestMix, results: dict[str, list[BenchResult]]) -> dict:
    """Per arm: request time (ms) and each rate, median over its launches; ratios TabbyAPI / ours."""
    arms = {}
    for arm, runs in results.items():
        needed = {k.decode_metric for k in mix.kinds}
        rates = [r for r in (_client_rates(x) for x in runs)
                 if needed <= set(r) and any(k.startswith("prefill") for k in r)]
        row: dict = {"launches": len(runs), "measured_launches": len(rates)}
        if rates:
            times = [mix.time_s(r) for r in rates]
            dec = [statistics.geometric_mean([r[m] for m in needed]) for r in rates]
            pre = [statistics.geometric_mean([v for k, v in r.items() if k.startswith("prefill")]) for r in rates]
            row |= {"request_ms": 1000 * statistics.median(times), "decode_tok_per_s": statistics.median(dec),
                    "prefill_tok_per_s": statistics.median(pre), "per_launch_request_ms": [1000 * t for t in times],
                    "per_launch_decode": dec, "per_launch_prefill": pre}
        # the same prompts templated alike, and the same greedy answers, on both servers: else rates differ for that
        server = [v for x in runs for k, v in x.headline().items() if k.startswith("prefill_tok_per_s_server@")]
        row |= {"prompt_tokens": _median([d.prompt_tokens_median for x in runs for d in x.decode]),
                "answer_tokens": _median([d.answer_tokens_median for x in runs for d in x.decode]),
                "prefill_tok_per_s_server": _median(server)}
        arms[arm] = row
    ratios = {}
    for other in ("ours", "subset"):
        a, b = arms.get("tabby", {}), arms.get(other, {})
        if "request_ms" in a and "request_ms" in b:
            ratios[f"tabby/{other}"] = {"request_time": a["request_ms"] / b["request_ms"],
                                        "decode": a["decode_tok_per_s"] / b["decode_tok_per_s"],
                                        "prefill": a["prefill_tok_per_s"] / b["prefill_tok_per_s"]}
    return {"arms": arms, "ratios": ratios, "mix": mix.to_dict(), "assumed": mix.describe_assumed()}


def render(summary: dict) -> str:
    lines = ["| server | launches | request time (ms) | decode tok/s | prefill tok/s (client) | prefill tok/s (server) "
             "| prompt tok | answer tok |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for arm, row in summary["arms"].items():
        more = " | ".join("-" if row.get(k) is None else f"{row[k]:,.0f}"
                          for k in ("prefill_tok_per_s_server", "prompt_tokens", "answer_tokens"))
        if "request_ms" in row:
            lines.append(f"| {ARMS[arm]} | {row['measured_launches']}/{row['launches']} | {row['request_ms']:.1f} | "
                         f"{row['decode_tok_per_s']:.1f} | {row['prefill_tok_per_s']:,.0f} | {more} |")
        else:
            lines.append(f"| {ARMS[arm]} | 0/{row['launches']} | NOT MEASURED | - | - | {more} |")
    for name, r in summary["ratios"].items():
        within = abs(r["request_time"] - 1) <= 0.05
        lines.append(f"{name}: request time {r['request_time']:.3f}x (above 1: TabbyAPI slower; within 5%: {within}), "
                     f"decode {r['decode']:.3f}x, prefill {r['prefill']:.3f}x")
    if summary["assumed"]:
        lines.append(f"answer lengths assumed: {summary['assumed']}")
    return "\n".join(lines)


def table(work: Path, db: str, name: str, out: Path) -> int:
    study = _study(db, name)
    results: dict[str, list[BenchResult]] = {}
    records = {}
    for path in sorted(work.glob("bench-*-*.json")):
        arm = path.stem.split("-")[1]
        payload = json.loads(path.read_text())
        records[path.stem] = payload
        results.setdefault(arm, []).append(BenchResult.from_dict(payload))
    (out / "bench-records.json").write_text(json.dumps(records))
    stored = study.user_attrs.get("request_mix")
    if stored:
        mix = RequestMix.from_dict(stored)
    elif results.get("ours"):
        mix = RequestMix.from_bench(results["ours"][0])
    else:
        print("no request mix: the study stored none and this project's server was not measured", file=sys.stderr)
        return 1
    expected = ["tabby", "ours"] + (["subset"] if (work / "subset.json").exists() else [])
    summary = summarize(mix, {arm: results.get(arm, []) for arm in expected})
    (out / "compare.json").write_text(json.dumps(summary, indent=1))
    text = render(summary)
    (out / "table.md").write_text(text + "\n")
    print(text)
    missing = [arm for arm in expected if "request_ms" not in summary["arms"][arm]]
    if missing:
        print(f"NOT MEASURED: {', '.join(missing)} (no launch measured every point): no ratio for them; "
              "see the logs in $OUT", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str]) -> int:
    cmd, *a = argv or ["-h"]
    if cmd == "prepare" and len(a) == 5:
        return prepare(Path(a[0]), a[1], a[2], Path(a[3]), int(a[4]))
    if cmd == "wait" and len(a) == 3:
        return wait(a[0], int(a[1]), float(a[2]))
    if cmd == "check-tabby" and len(a) == 2:
        return check_tabby(a[0], Path(a[1]))
    if cmd == "table" and len(a) == 4:
        return table(Path(a[0]), a[1], a[2], Path(a[3]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
