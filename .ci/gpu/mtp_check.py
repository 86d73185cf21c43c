"""GPU machine (issue #13): the shape-true synthetic Qwen3.8-27B with its MTP layer under a 24 GiB cap.

For exllamav3's defaults (no drafting) and MTP drafting with 1, 2 and 4 draft tokens (as time allows),
one fresh launch each: the server's own VRAM readings (/v1/server_info: torch's allocated after load,
its peak after bench) against the memory model's prediction for the same configuration (what the
loop's feasibility stage computes: MemoryModel.estimate + check_fit against a 24 GiB budget), then
bench at 1K context (math prompts, 256 greedy tokens) for decode speed and the drafted/accepted
counts, and the cost of one rejected draft token:

    (time per output token with MTP - without) / (rejected drafts per output token)

The checkpoint's weights are random, so MTP's drafts are (almost) never accepted: its speed here is
the cost of drafting without the gain, never the real model's MTP speed.

Device call (nvidia-h200, timeout_s 600), carry [".device-kit"], about 6-7 minutes with all four:
    source .device-kit/setup.sh && python .ci/gpu/mtp_check.py
It writes /tmp/q27-mtp first (python -m serving.synthetic qwen3.8-27b /tmp/q27-mtp --mtp-layers 1,
~15 s, 14.6+ GiB; skipped when /tmp/q27-mtp.complete exists). ONLY=defaults,mtp-1 limits the settings;
a setting is skipped when fewer than SETTING_S (120) seconds are left before DEADLINE_S (560).
Results: $OUT/mtp.json (everything, printed as a table at the end) and $OUT/bench-<setting>.json.

CPU rehearsal (no exllamav3 there): REHEARSE=cpu serves the tiny model on the transformers engine,
with n-gram drafting standing in for MTP, and predicts memory for a 4-layer shape-true checkpoint:
    REHEARSE=cpu OUT=/tmp/mtp-out .venv/bin/python .ci/gpu/mtp_check.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from autoresearch.trial import provenance
from search_space import Budget, check_fit
from search_space.memory import MemoryModel
from search_space.model_info import read_model_info
from serving.config import ServingConfig
from serving.launcher import LaunchSpec, free_port, launch

OUT = Path(os.environ.get("OUT", "/tmp/out"))
REHEARSE = os.environ.get("REHEARSE") == "cpu"
MODEL = Path(os.environ.get("MODEL", "/tmp/q27-mtp-l4" if REHEARSE else "/tmp/q27-mtp"))
VRAM = 24 * 2**30
GIB = 2**30
DEADLINE_S = float(os.environ.get("DEADLINE_S", "560"))
SETTING_S = float(os.environ.get("SETTING_S", "120"))
TOLERANCE = 0.25 * GIB  # the issue: fits 24 GiB as the memory model predicts, within 0.25 GiB
SETTINGS = {
    "defaults": {},
    "mtp-1": {"draft_mode": "mtp", "num_draft_tokens": 1},
    "mtp-2": {"draft_mode": "mtp", "num_draft_tokens": 2},
    "mtp-4": {"draft_mode": "mtp", "num_draft_tokens": 4},
}
# bench at 1K, as the issue asks; the 8K prefill makes the measured peak include a full prefill chunk
# (max_chunk_size 2048 rows), which is what the memory model's peak is (the loop's bench has it too)
BENCH = ["--decode", "1024", "--decode-kinds", "math", "--decode-tokens", "256", "--max-repeats", "5",
         "--prefill", os.environ.get("PREFILL", "1024,8192")]
if REHEARSE:
    BENCH = ["--decode", "256", "--decode-kinds", "math", "--decode-tokens", "32", "--max-repeats", "3",
             "--prefill", "256"]
STARTED = time.monotonic()


def elapsed() -> float:
    return time.monotonic() - STARTED


def ensure_checkpoint() -> dict:
    done = MODEL.with_name(MODEL.name + ".complete")
    if done.exists():
        return {"model": str(MODEL), "written": False}
    cmd = [sys.executable, "-m", "serving.synthetic", "qwen3.8-27b", str(MODEL), "--mtp-layers", "1"]
    if REHEARSE:
        cmd += ["--layers", "4"]
    t = time.monotonic()
    subprocess.run(cmd, check=True)
    done.touch()
    size = sum(p.stat().st_size for p in MODEL.iterdir() if p.is_file())
    return {"model": str(MODEL), "written": True, "write_s": round(time.monotonic() - t, 1), "bytes": size}


def tiny_model() -> Path:
    """The CPU rehearsal's served model: the tiny Hugging Face checkpoint."""
    path = Path("/tmp/mtp-rehearse-tiny")
    if not (path / "config.json").exists():
        subprocess.run([sys.executable, "-m", "serving.synthetic", "tiny", str(path)], check=True)
    return path


def predict(memory: MemoryModel, args: dict) -> dict:
    config = ServingConfig.from_dict({"engine": "exllamav3", "args": args})
    estimate = memory.estimate(config)
    check = check_fit(estimate, Budget(vram_bytes=VRAM))
    return {**estimate.components(), "usable_bytes": check.budget.usable_bytes,
            "reserve_bytes": check.budget.reserve_bytes, "fits": check.fits, "config_digest": config.digest}


def served_args(args: dict) -> dict:
    """What is launched: the setting itself, or on the CPU rehearsal n-gram drafting in MTP's place."""
    if REHEARSE and args.get("draft_mode") == "mtp":
        return {"draft_mode": "ngram", "ngram_match_min": 1, "num_draft_tokens": args["num_draft_tokens"]}
    return args


def server_info(url: str) -> dict:
    """The server's own readings, through the project's one client (autoresearch.trial.provenance)."""
    return provenance.server_info(url) or {"error": "no /v1/server_info (see the warning above)"}


def gpu_used_bytes() -> int | None:
    """Device-wide memory in use (NVML), CUDA contexts included; None without a GPU."""
    try:
        from gpu import visible_gpu

        with visible_gpu() as gpu:
            return gpu.memory_used_bytes() if gpu is not None else None
    except Exception:
        return None


def measure(name: str, args: dict, model: Path) -> dict:
    engine = "transformers" if REHEARSE else "exllamav3"
    spec = LaunchSpec(model_dir=model, config=ServingConfig.from_dict({"engine": engine, "args": served_args(args)}),
                      port=free_port(), log_path=Path(f"/tmp/mtp-check/{name}.log"),
                      vram_limit_bytes=None if REHEARSE else VRAM, startup_timeout_s=400)
    row: dict = {"setting": name, "args": args, "served_args": served_args(args), "engine": engine}
    path = OUT / f"bench-{name}.json"
    before = gpu_used_bytes()
    t = time.monotonic()
    try:
        with launch(spec) as server:
            row["load_s"] = round(time.monotonic() - t, 1)
            loaded = server_info(server.url)
            row["gpu_used_loaded_bytes"] = (gpu_used_bytes() or 0) - (before or 0) if before is not None else None
            bench = subprocess.run([sys.executable, "-m", "bench", "--url", server.url, *BENCH, "--json", str(path)],
                                   capture_output=True, text=True)
            after = server_info(server.url)
            row["gpu_used_after_bench_bytes"] = (gpu_used_bytes() or 0) - (before or 0) if before is not None else None
            if bench.returncode != 0:
                row["error"] = f"bench exit {bench.returncode}: {bench.stderr[-2000:]}"
    except Exception as exc:  # one setting that fails must not hide the others
        row["error"] = f"{type(exc).__name__}: {exc}"
        row["log_tail"] = Path(spec.log_path).read_text(errors="replace")[-3000:] if spec.log_path.exists() else ""
        return row
    row["bench_s"] = round(time.monotonic() - t - row["load_s"], 1)
    for key in ("vram_allocated_bytes", "vram_peak_bytes", "vram_reserved_bytes", "vram_limit_bytes"):
        row[f"loaded_{key}"], row[f"after_{key}"] = loaded.get(key), after.get(key)
    row["server_config"] = after.get("config")
    if path.exists():
        row.update(decode_numbers(json.loads(path.read_text())))
    return row


def decode_numbers(result: dict) -> dict:
    point = result["decode"][0]
    valid = [r for r in point["runs"] if r.get("ok") and r.get("invalid_reason") is None]
    completion = sum(r.get("completion_tokens") or 0 for r in valid)
    spec = [r for r in valid if r.get("spec_accepted_tokens") is not None]
    accepted = sum(r["spec_accepted_tokens"] for r in spec)
    rejected = sum(r.get("spec_rejected_tokens") or 0 for r in spec)
    prefill = {p["target_tokens"]: (p.get("prefill_tok_per_s_server") or {}).get("median") for p in result["prefill"]}
    return {
        "decode_key": point["key"], "valid_runs": len(valid), "invalid_reasons": point.get("invalid_reasons"),
        "decode_tok_per_s_client": (point.get("decode_tok_per_s_client") or {}).get("median"),
        "decode_tok_per_s_server": (point.get("decode_tok_per_s_server") or {}).get("median"),
        "completion_tokens": completion, "spec_runs": len(spec),
        "spec_drafted_tokens": accepted + rejected if spec else None,
        "spec_accepted_tokens": accepted if spec else None, "spec_rejected_tokens": rejected if spec else None,
        "spec_acceptance": accepted / (accepted + rejected) if spec and accepted + rejected else None,
        "rejected_per_output_token": rejected / completion if spec and completion else None,
        "prefill_tok_per_s_server": prefill,
    }


def compare(rows: list[dict]) -> None:
    """Memory: predicted vs measured. Speed: the cost per rejected draft against the defaults' row."""
    base = next((r for r in rows if r["setting"] == "defaults" and r.get("decode_tok_per_s_client")), None)
    for r in rows:
        p = r.get("predicted") or {}
        if r.get("after_vram_peak_bytes") and p:
            r["peak_error_bytes"] = r["after_vram_peak_bytes"] - p["peak_bytes"]
            r["peak_within_tolerance"] = abs(r["peak_error_bytes"]) <= TOLERANCE
            r["measured_fits"] = r["after_vram_peak_bytes"] <= p["usable_bytes"]
        if r.get("loaded_vram_allocated_bytes") and p:
            r["resident_error_bytes"] = r["loaded_vram_allocated_bytes"] - p["resident_bytes"]
        if base is None or r is base or not r.get("rejected_per_output_token"):
            continue
        for clock in ("client", "server"):
            mine, theirs = r.get(f"decode_tok_per_s_{clock}"), base.get(f"decode_tok_per_s_{clock}")
            if mine and theirs:
                extra_ms = 1000 / mine - 1000 / theirs
                r[f"extra_ms_per_output_token_{clock}"] = extra_ms
                r[f"cost_ms_per_rejected_draft_{clock}"] = extra_ms / r["rejected_per_output_token"]


def table(rows: list[dict]) -> str:
    def g(v):
        return f"{v / GIB:.2f}" if isinstance(v, int | float) else "-"

    def f(v, fmt):
        return format(v, fmt) if isinstance(v, int | float) else "-"

    lines = ["| setting | predicted resident / peak GiB | measured allocated after load / peak after bench GiB "
             "| peak error GiB | fits 24 GiB (pred, meas) | decode tok/s client (server) | drafted | accepted "
             "| rejected / output token | cost per rejected draft ms client (server) |",
             "|---|---|---|---|---|---|---:|---:|---:|---|"]
    for r in rows:
        p = r.get("predicted") or {}
        if r.get("error"):
            lines.append(f"| {r['setting']} | {g(p.get('resident_bytes'))} / {g(p.get('peak_bytes'))} | error: "
                         f"{r['error'][:160]} | | | | | | | |")
            continue
        lines.append(
            f"| {r['setting']} | {g(p.get('resident_bytes'))} / {g(p.get('peak_bytes'))} "
            f"| {g(r.get('loaded_vram_allocated_bytes'))} / {g(r.get('after_vram_peak_bytes'))} "
            f"| {f((r.get('peak_error_bytes') or 0) / GIB, '+.3f') if 'peak_error_bytes' in r else '-'} "
            f"| {p.get('fits')}, {r.get('measured_fits')} "
            f"| {f(r.get('decode_tok_per_s_client'), '.1f')} ({f(r.get('decode_tok_per_s_server'), '.1f')}) "
            f"| {r.get('spec_drafted_tokens') if r.get('spec_drafted_tokens') is not None else '-'} "
            f"| {r.get('spec_accepted_tokens') if r.get('spec_accepted_tokens') is not None else '-'} "
            f"| {f(r.get('rejected_per_output_token'), '.2f')} "
            f"| {f(r.get('cost_ms_per_rejected_draft_client'), '.2f')} "
            f"({f(r.get('cost_ms_per_rejected_draft_server'), '.2f')}) |")
    return "\n".join(lines)


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    Path("/tmp/mtp-check").mkdir(exist_ok=True)
    report: dict = {"note": "random weights: MTP acceptance is near zero, so MTP decode here is the cost of "
                            "drafting without its gain, never the real model's MTP speed",
                    "vram_budget_bytes": VRAM, "tolerance_bytes": TOLERANCE, "bench_args": BENCH,
                    "rehearsal": REHEARSE}
    report["checkpoint"] = ensure_checkpoint()
    info = read_model_info(MODEL)
    memory = MemoryModel(info)
    report["model_info"] = {"has_mtp_weights": info.has_mtp_weights, "mtp_layers": info.mtp_num_hidden_layers,
                            "mtp_weights_bytes": memory.mtp_weights_bytes, "weights_bytes": memory.weights_bytes}
    print(f"[{elapsed():.0f}s] checkpoint {report['checkpoint']}; {report['model_info']}", flush=True)
    served = tiny_model() if REHEARSE else MODEL
    settings = dict(SETTINGS)
    if only := os.environ.get("ONLY"):
        settings = {k: v for k, v in settings.items() if k in only.split(",")}
    rows: list[dict] = []
    for name, args in settings.items():
        if elapsed() > DEADLINE_S - SETTING_S:
            rows.append({"setting": name, "args": args, "skipped": f"out of time at {elapsed():.0f} s"})
            print(f"[{elapsed():.0f}s] {name}: skipped, out of time", flush=True)
            continue
        try:
            predicted = predict(memory, args)
        except Exception as exc:
            predicted = {"error": f"{type(exc).__name__}: {exc}"}
        row = measure(name, args, served)
        row["predicted"] = predicted
        rows.append(row)
        compare([r for r in rows if not r.get("skipped")])
        report["rows"] = rows
        (OUT / "mtp.json").write_text(json.dumps(report, indent=1, default=str))
        print(f"[{elapsed():.0f}s] {name}: load {row.get('load_s')} s, bench {row.get('bench_s')} s, decode "
              f"{row.get('decode_tok_per_s_client')} tok/s, drafted {row.get('spec_drafted_tokens')}, accepted "
              f"{row.get('spec_accepted_tokens')}, peak {row.get('after_vram_peak_bytes')} vs predicted "
              f"{predicted.get('peak_bytes')}{', ERROR ' + row['error'][:300] if row.get('error') else ''}",
              flush=True)
    report["rows"] = rows
    report["table"] = table([r for r in rows if not r.get("skipped")])
    report["elapsed_s"] = round(elapsed(), 1)
    (OUT / "mtp.json").write_text(json.dumps(report, indent=1, default=str))
    print(report["table"])
    print(f"Note: {report['note']}. Peak = torch's max_memory_allocated after bench (prefill {BENCH[-1]}, "
          f"decode @{BENCH[1]}); tolerance {TOLERANCE / GIB} GiB; budget {VRAM / GIB:.0f} GiB less the reserve.")
    if REHEARSE:
        print("REHEARSAL: served the tiny model on the transformers engine with n-gram drafting in MTP's place; "
              "the predictions are for the 4-layer shape-true checkpoint, the measurements are not comparable.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
