"""GPU machine (issue #39): the shape-true 27B with its synthetic DFlash2 drafter under a 24 GiB cap.

Phase `serve`: for each setting, one fresh `python -m serving` launch (mtp_check.measure: the server's own
VRAM readings from /v1/server_info, then bench at 1K for decode speed and drafted/accepted counts) against
the memory model's prediction for the same configuration (MemoryModel.estimate + check_fit, as the loop's
feasibility stage): the target alone, target + DFlash2 and target + MTP at the pinned cache (32768), and the
target alone and + DFlash2 at the largest cache the memory model says fits in 24 GiB. The peak after load
already holds a full prefill chunk (the engine's warm-up prefills max_chunk_size + 64 tokens).
Per-round cost: the drafter is random, so (almost) no draft is accepted and each DFlash2 round (one
draft pass over the block + one verify pass of 1 + num_draft_tokens rows) yields one token:

    round_ms = time per output token x output tokens / rounds,  rounds = output tokens - accepted drafts

against the plain decode step (1000 / decode tok/s of the target alone). From the ratio and the published
3090 rates (42 tok/s plain, ~115 MTP) it prints the tokens per round DFlash2 needs to beat each. H200
ratios are launch- and latency-bound (the device README): on a 3090 the verify pass is closer to a plain
step, so the ratio here is an upper bound there.

Phase `study`: `python -m autoresearch --model Q27 --draft-model DRAFTER --suite none --vram 24GiB
--emulate-vram`, the DFlash2 lever enqueued first, stopped at the deadline (as a kill would) and resumed by
the next call on the warm machine (state in /tmp/dflash2-study).

RANDOM WEIGHTS: the drafter drafts nothing useful and the target's outputs are noise; only memory,
plumbing and per-round cost are the real ones. Every number written says so.

    source .device-kit/setup.sh && bash .ci/gpu/dflash2-check.sh        # see there
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import mtp_check  # noqa: E402  (the GPU scripts' shared launch-and-measure helpers)

from search_space import Budget, check_fit  # noqa: E402
from search_space.memory import MemoryModel  # noqa: E402
from search_space.model_info import read_model_info  # noqa: E402
from serving.config import PAGE_TOKENS, ServingConfig  # noqa: E402

OUT = Path(os.environ.get("OUT", "/tmp/out"))
WORK = Path("/tmp/dflash2-check")
MODEL = Path(os.environ.get("MODEL", "/tmp/q27-mtp"))  # the published layout: text + MTP head
DRAFTER = Path(os.environ.get("DRAFTER", "/tmp/q27-dflash2"))
GIB = 2**30
VRAM = 24 * GIB
PINNED_CACHE = 32768
MAX_CACHE = 262144  # the model's context
DEADLINE_S = float(os.environ.get("SERVE_DEADLINE_S", "260"))  # the serve phase stops starting settings here
SETTING_S = float(os.environ.get("SETTING_S", "60"))
# ROWS=name,name (e.g. none@max,dflash2@max) launches only those settings: a later call measures what an earlier cut
STARTED = time.monotonic()
NOTE = ("random weights: the DFlash2 drafter drafts nothing useful (acceptance about zero) and MTP's head "
        "neither; only memory, plumbing and per-round cost are the real models'")
PLAIN_3090, MTP_3090 = 42.0, 115.0  # published batch-1 decode tok/s of the 4-bit 27B on an RTX 3090


def progress(text: str) -> None:
    line = f"[{time.monotonic() - STARTED:.0f}s] {text}"
    print(line, flush=True)
    with (OUT / "progress.log").open("a") as f:
        f.write(line + "\n")


def write_checkpoints() -> dict:
    out = {}
    for path, cmd in ((MODEL, ["qwen3.8-27b", str(MODEL), "--mtp-layers", "1"]),
                      (DRAFTER, ["qwen3.8-27b-dflash2", str(DRAFTER)])):
        done = path.with_name(path.name + ".complete")
        if not done.exists():
            t = time.monotonic()
            subprocess.run([sys.executable, "-m", "serving.synthetic", *cmd], check=True)
            done.touch()
            out[path.name] = {"write_s": round(time.monotonic() - t, 1)}
        out.setdefault(path.name, {})["bytes"] = sum(p.stat().st_size for p in path.iterdir() if p.is_file())
    return out


def config_of(args: dict) -> ServingConfig:
    return ServingConfig.from_dict({"engine": "exllamav3", "args": args})


def largest_fitting_cache(memory: MemoryModel, args: dict) -> int:
    """The largest cache_tokens (whole pages, up to the model's context) the memory model fits in 24 GiB."""
    def fits(tokens: int) -> bool:
        return check_fit(memory.estimate(config_of({**args, "cache_tokens": tokens})), Budget(vram_bytes=VRAM)).fits

    low, high = 0, MAX_CACHE // PAGE_TOKENS
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(mid * PAGE_TOKENS) else (low, mid - 1)
    return low * PAGE_TOKENS


def settings(memory: MemoryModel) -> dict[str, dict]:
    dflash = {"draft_mode": "dflash", "draft_model_dir": str(DRAFTER), "num_draft_tokens": 7}  # block 8 - 1
    mtp = {"draft_mode": "mtp", "num_draft_tokens": 4}
    out = {"none@32768": {"cache_tokens": PINNED_CACHE}, "dflash2@32768": {**dflash, "cache_tokens": PINNED_CACHE}}
    for name, args in (("none", {}), ("dflash2", dflash)):
        out[f"{name}@max"] = {**args, "cache_tokens": largest_fitting_cache(memory, args)}
    out["mtp@32768"] = {**mtp, "cache_tokens": PINNED_CACHE}
    out["mtp@max"] = {**mtp, "cache_tokens": largest_fitting_cache(memory, mtp)}
    return out


def round_cost(rows: list[dict]) -> dict:
    """Per-round cost of DFlash2 (and MTP) against the plain step, at the pinned cache."""
    by = {r["setting"]: r for r in rows}
    base = by.get("none@32768", {})
    out = {}
    for name in ("dflash2@32768", "mtp@32768"):
        r = by.get(name, {})
        for clock in ("client", "server"):
            plain, mine = base.get(f"decode_tok_per_s_{clock}"), r.get(f"decode_tok_per_s_{clock}")
            completion, accepted = r.get("completion_tokens"), r.get("spec_accepted_tokens")
            if not (plain and mine and completion and accepted is not None and completion > accepted):
                continue
            step_ms = 1000 / plain
            round_ms = 1000 / mine * completion / (completion - accepted)
            ratio = round_ms / step_ms
            out[f"{name}_{clock}"] = {
                "plain_step_ms": round(step_ms, 3), "round_ms": round(round_ms, 3), "round_over_step": round(ratio, 3),
                "accepted_per_round": round(accepted / (completion - accepted), 4),
                "tokens_per_round_to_beat_plain": round(ratio, 2),
                "tokens_per_round_to_beat_mtp_on_3090": round(ratio * MTP_3090 / PLAIN_3090, 2),
            }
    return out


def table(rows: list[dict], costs: dict) -> str:
    def g(v):
        return f"{v / GIB:.2f}" if isinstance(v, int | float) else "-"

    lines = [f"Note: {NOTE}.", "",
             "| setting | cache tokens | predicted resident / peak GiB | measured allocated / peak after load GiB "
             "| peak after bench GiB | peak error GiB | within 0.25 | decode tok/s client (server) | drafted / accepted |",
             "|---|---:|---|---|---|---|---|---|---|"]
    for r in rows:
        p = r.get("predicted") or {}
        if r.get("skipped") or r.get("error"):
            lines.append(f"| {r['setting']} | {r['args'].get('cache_tokens')} | {g(p.get('resident_bytes'))} / "
                         f"{g(p.get('peak_bytes'))} | {(r.get('skipped') or 'error: ' + r['error'])[:200]} | | | | | |")
            continue
        peak = max(v for v in (r.get("loaded_vram_peak_bytes"), r.get("after_vram_peak_bytes")) if v is not None) \
            if r.get("after_vram_peak_bytes") or r.get("loaded_vram_peak_bytes") else None
        err = peak - p["peak_bytes"] if peak is not None and p.get("peak_bytes") else None
        dec = r.get("decode_tok_per_s_client")
        lines.append(
            f"| {r['setting']} | {r['args'].get('cache_tokens')} | {g(p.get('resident_bytes'))} / {g(p.get('peak_bytes'))} "
            f"| {g(r.get('loaded_vram_allocated_bytes'))} / {g(r.get('loaded_vram_peak_bytes'))} "
            f"| {g(r.get('after_vram_peak_bytes'))} | {f'{err / GIB:+.3f}' if err is not None else '-'} "
            f"| {abs(err) <= 0.25 * GIB if err is not None else '-'} "
            f"| {f'{dec:.1f}' if dec else '-'} ({r.get('decode_tok_per_s_server') or '-'}) "
            f"| {r.get('spec_drafted_tokens', '-')} / {r.get('spec_accepted_tokens', '-')} |")
    lines += ["", "Per-round cost (random drafter: each round yields one token; H200, not a 3090):", "",
              "| drafter, clock | plain step ms | round ms | round / step | accepted per round "
              "| tokens per round to beat plain | to beat MTP on a 3090 (115 vs 42 tok/s) |",
              "|---|---|---|---|---|---|---|"]
    for name, c in costs.items():
        lines.append(f"| {name} | {c['plain_step_ms']} | {c['round_ms']} | {c['round_over_step']} "
                     f"| {c['accepted_per_round']} | {c['tokens_per_round_to_beat_plain']} "
                     f"| {c['tokens_per_round_to_beat_mtp_on_3090']} |")
    return "\n".join(lines)


def serve_phase(report: dict) -> None:
    info = read_model_info(MODEL)
    draft = read_model_info(DRAFTER)
    memory = MemoryModel(info)
    report["drafter_info"] = {"architecture": draft.architecture, "block_size": draft.dflash_block_size,
                              "target_layers": draft.dflash_target_layers, "bytes": draft.total_bytes,
                              "layer_types": list(draft.layer_types)}
    plan = settings(memory)
    report["settings"] = plan
    progress("settings (largest caches from the memory model): "
             + ", ".join(f"{k} cache {v['cache_tokens']}" for k, v in plan.items()))
    rows = report["rows"] = []
    only = {r for r in os.environ.get("ROWS", "").split(",") if r}  # e.g. ROWS=none@max,mtp@32768: those alone
    for name, args in plan.items():
        if only and name not in only:
            continue
        try:
            predicted = mtp_check.predict(memory, args)
        except Exception as exc:  # a prediction that fails is a finding, not a stop
            predicted = {"error": f"{type(exc).__name__}: {exc}"}
        if time.monotonic() - STARTED > DEADLINE_S - SETTING_S:
            rows.append({"setting": name, "args": args, "predicted": predicted,
                         "skipped": f"out of time at {time.monotonic() - STARTED:.0f} s"})
            progress(f"{name}: skipped, out of time")
            continue
        progress(f"{name}: launching (predicted peak {predicted.get('peak_bytes', 0) / GIB:.2f} GiB, "
                 f"fits {predicted.get('fits')})")
        row = mtp_check.measure(name.replace("@", "-"), args, MODEL)
        row["setting"], row["predicted"] = name, predicted
        rows.append(row)
        (OUT / "dflash2-check.json").write_text(json.dumps(report, indent=1, default=str))
        progress(f"{name}: load {row.get('load_s')} s, peak after load {row.get('loaded_vram_peak_bytes')}, after "
                 f"bench {row.get('after_vram_peak_bytes')} vs predicted {predicted.get('peak_bytes')}; decode "
                 f"{row.get('decode_tok_per_s_client')} tok/s, drafted {row.get('spec_drafted_tokens')} accepted "
                 f"{row.get('spec_accepted_tokens')}{'; ERROR ' + row['error'][:400] if row.get('error') else ''}")
    report["round_cost"] = round_cost(rows)
    report["table"] = table(rows, report["round_cost"])
    (OUT / "dflash2-table.md").write_text(report["table"] + "\n")
    print(report["table"], flush=True)


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    WORK.mkdir(parents=True, exist_ok=True)
    Path("/tmp/mtp-check").mkdir(exist_ok=True)  # mtp_check.measure's server logs
    mtp_check.OUT = WORK  # its bench-<setting>.json files stay here: $OUT takes at most 8 files
    mtp_check.BENCH = ["--decode", "1024", "--decode-kinds", "math", "--decode-tokens", "128", "--max-repeats", "3",
                       "--prefill", "8192"]
    report: dict = {"note": NOTE, "vram_budget_bytes": VRAM, "bench_args": mtp_check.BENCH}
    try:
        report["checkpoints"] = write_checkpoints()
        progress(f"checkpoints {report['checkpoints']}")
        if "serve" in os.environ.get("PHASES", "serve"):
            serve_phase(report)
    except Exception as exc:  # keep what was measured
        report["error"] = f"{type(exc).__name__}: {exc}"
        progress(f"ERROR {report['error']}")
    (OUT / "dflash2-check.json").write_text(json.dumps(report, indent=1, default=str))
    return 1 if report.get("error") else 0


if __name__ == "__main__":
    raise SystemExit(main())
