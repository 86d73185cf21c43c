"""GPU machine (issue #13): where the memory model's missing VRAM goes, allocation by allocation.

The shape-true 27B was under-predicted by ~0.6 GiB resident, in the text and the multimodal layout
alike (examples/q27-table-study: calibrated offsets 0.52-0.58 GiB; mtp_check: 0.62 GiB). This probe
found the terms (the loader's 128 MiB weight slabs, each GDN layer's graph statics: now in
search_space/memory.py; its run of 2026-12-01 is examples/real-0.5b-workload/mtp-27b/memory-probe*.json).
It
loads a checkpoint exactly as the server does (serving.__main__.build_engine, then the engine's own
_load and _warmup), in a fresh process per variant, with torch's allocator history on, and writes:

- VRAM allocated after each exllamav3 step of the load (Model.from_config, Cache, Model.load,
  Model.warmup, Generator, the engine's warm-up jobs), with the peak of each;
- every block still allocated after the warm-up, grouped by the first frame of exllamav3 (or the
  project) that allocated it, largest first;
- the memory model's prediction for the same configuration, by component.

Device call (nvidia-h200), carry [".device-kit"], ~3-4 minutes:
    source .device-kit/setup.sh && python .ci/gpu/memory_probe.py
VARIANTS=name,... limits the variants; MODEL27 is the multimodal 27B with MTP (written first when
missing, as mtp_check.py does), /tmp/q27-l8 an 8-layer cut of it (per-layer vs per-model terms).
Results: $OUT/memory-probe.json and a table on stdout.

One variant in this process (what the parent runs): python .ci/gpu/memory_probe.py --one NAME
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(os.environ.get("OUT", "/tmp/out"))
MODEL27 = Path(os.environ.get("MODEL27", "/tmp/q27-mtp"))
MODEL_L8 = Path("/tmp/q27-l8")
REAL = Path(os.environ.get("REAL", "/tmp/real-model/exl3-4.0"))
VRAM = 24 * 2**30
GIB = 2**30
VARIANTS = {
    "27b-defaults": (MODEL27, {}),
    "27b-batch16": (MODEL27, {"max_batch_size": 16}),
    "27b-cache8k": (MODEL27, {"cache_tokens": 8192}),
    "27b-chunk512": (MODEL27, {"max_chunk_size": 512}),
    "27b-mtp1": (MODEL27, {"draft_mode": "mtp", "num_draft_tokens": 1}),
    "27b-l8": (MODEL_L8, {}),
    "real-0.5b": (REAL, {}),
}


def write_checkpoints() -> dict:
    done = {}
    for path, extra in ((MODEL27, []), (MODEL_L8, ["--layers", "8"])):
        marker = path.with_name(path.name + ".complete")
        if marker.exists():
            continue
        t = time.monotonic()
        subprocess.run([sys.executable, "-m", "serving.synthetic", "qwen3.8-27b", str(path), "--mtp-layers", "1",
                        *extra], check=True)
        marker.touch()
        done[str(path)] = round(time.monotonic() - t, 1)
    return done


# ---- one variant, in its own process -----------------------------------------------------------------


def _frame_key(frames: list[dict]) -> str:
    """The first frame of exllamav3 or this project: who asked for the block."""
    for f in frames:
        name = f.get("filename", "")
        if "exllamav3" in name or "/serving/" in name:
            short = name.split("exllamav3/")[-1] if "exllamav3" in name else name.split("/serving/")[-1]
            return f"{short}:{f.get('line')} {f.get('name')}"
    return "(no exllamav3 frame)"


def _stack(frames: list[dict]) -> list[str]:
    keep = [f for f in frames if "exllamav3" in f.get("filename", "") or "/serving/" in f.get("filename", "")]
    return [f"{f['filename'].split('site-packages/')[-1]}:{f.get('line')} {f.get('name')}" for f in keep[:6]]


def run_one(name: str) -> dict:
    import torch
    from exllamav3 import Cache, Generator, Model

    from search_space import Budget, check_fit
    from search_space.memory import MemoryModel
    from search_space.model_info import read_model_info
    from serving.__main__ import build_engine
    from serving.config import ServingConfig

    model_dir, args = VARIANTS[name]
    config = ServingConfig.from_dict({"engine": "exllamav3", "args": args})
    estimate = MemoryModel(read_model_info(model_dir)).estimate(config)
    steps: list[dict] = []

    def mark(label: str, t0: float) -> None:
        torch.cuda.synchronize()
        steps.append({"step": label, "allocated": torch.cuda.memory_allocated(0),
                      "peak": torch.cuda.max_memory_allocated(0), "reserved": torch.cuda.memory_reserved(0),
                      "s": round(time.monotonic() - t0, 2)})
        torch.cuda.reset_peak_memory_stats(0)

    def wrap(owner, attr: str, label: str):
        original = getattr(owner, attr)

        def wrapped(*a, **kw):
            t0 = time.monotonic()
            result = original(*a, **kw)
            mark(label, t0)
            return result

        setattr(owner, attr, wrapped)

    wrap(Model, "load", "Model.load")
    wrap(Model, "warmup", "Model.warmup")
    wrap(Cache, "__init__", "Cache")
    wrap(Generator, "__init__", "Generator")
    torch.cuda.init()
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python", max_entries=400_000)
    engine = build_engine(config, model_dir, vram_limit_bytes=VRAM)
    t0 = time.monotonic()
    engine._load()
    mark("(rest of _load)", t0)
    t0 = time.monotonic()
    engine._warmup()
    mark("engine._warmup", t0)
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    groups: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    stacks: dict[str, list[str]] = {}
    for segment in snapshot["segments"]:
        for block in segment["blocks"]:
            if block["state"] != "active_allocated":
                continue
            frames = block.get("frames") or []
            key = _frame_key(frames)
            groups[key][0] += block["size"]
            groups[key][1] += 1
            stacks.setdefault(key, _stack(frames))
    top = sorted(groups.items(), key=lambda kv: -kv[1][0])
    return {
        "variant": name, "model": str(model_dir), "args": args,
        "predicted": {**estimate.components(),
                      "fits": check_fit(estimate, Budget(vram_bytes=VRAM)).fits},
        "steps": steps,
        "allocated_after_warmup": torch.cuda.memory_allocated(0),
        "blocks_by_origin": [{"origin": k, "bytes": v[0], "blocks": v[1], "stack": stacks[k]} for k, v in top[:60]],
    }


# ---- the parent: every variant in a fresh process -------------------------------------------------


def table(rows: list[dict]) -> str:
    lines = []
    for row in rows:
        if "error" in row:
            lines.append(f"## {row['variant']}: {row['error'][-600:]}")
            continue
        p = row["predicted"]
        gap = row["allocated_after_warmup"] - p["resident_bytes"]
        lines.append(f"## {row['variant']} {row['args']}: predicted resident {p['resident_bytes'] / GIB:.3f} "
                     f"(weights {p['weights_bytes'] / GIB:.3f}, kv {p['kv_cache_bytes'] / GIB:.3f}, recurrent "
                     f"{p['recurrent_state_bytes'] / GIB:.3f}, draft {p['draft_bytes'] / GIB:.3f}), workspace "
                     f"{p['workspace_bytes'] / GIB:.3f}; allocated after warm-up "
                     f"{row['allocated_after_warmup'] / GIB:.3f} GiB: gap {gap / GIB:+.3f} GiB")
        for s in row["steps"]:
            lines.append(f"   {s['step']:<18} allocated {s['allocated'] / GIB:8.3f}  peak {s['peak'] / GIB:8.3f}  "
                         f"{s['s']:6.1f} s")
        for b in row["blocks_by_origin"][:25]:
            lines.append(f"   {b['bytes'] / 2**20:10.1f} MiB {b['blocks']:6d}  {b['origin']}")
    return "\n".join(lines)


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        print("PROBE-JSON " + json.dumps(run_one(sys.argv[2])))
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    written = write_checkpoints()
    names = [n for n in os.environ.get("VARIANTS", ",".join(VARIANTS)).split(",") if n]
    deadline = float(os.environ.get("DEADLINE_S", "540"))
    rows = []
    for name in names:
        if not VARIANTS[name][0].exists():
            rows.append({"variant": name, "error": f"no checkpoint at {VARIANTS[name][0]}"})
            continue
        if time.monotonic() - started > deadline - 45:
            rows.append({"variant": name, "error": f"skipped: out of time at {time.monotonic() - started:.0f} s"})
            continue
        try:
            proc = subprocess.run([sys.executable, __file__, "--one", name], capture_output=True, text=True,
                                  timeout=max(30.0, deadline - (time.monotonic() - started)))
        except subprocess.TimeoutExpired as exc:
            rows.append({"variant": name, "error": f"timed out after {exc.timeout:.0f} s"})
            continue
        line = next((x for x in proc.stdout.splitlines() if x.startswith("PROBE-JSON ")), None)
        rows.append(json.loads(line[len("PROBE-JSON "):]) if line and proc.returncode == 0
                    else {"variant": name, "error": f"exit {proc.returncode}: {proc.stderr[-3000:]}"})
        (OUT / "memory-probe.json").write_text(json.dumps({"written": written, "rows": rows}, indent=1))
    print(table(rows))
    print(f"elapsed {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
