"""GPU machine (issue #38): the batching gain of the shape-true 27B under a 24 GiB cap, at the suite's concurrency.

The night plan's task tier costs (prompt / prefill + answer / decode) / batch gain per task; this measures the
gain the README's 3090 night states: the study's baseline configuration (defaults, cache_tokens 32768) served
by this project's server under --emulate-vram 24GiB, then N streams of ANSWER_TOKENS each at once (ignore_eos),
for N = 1, 4, the offline suite's concurrency and 16; aggregate decode = all tokens / wall time. The gain is
aggregate(N) / aggregate(1). (The loop measures its own once it runs: the baseline's first answers, printed with
the plan as "a batching gain of G over batch-1 decode".)

Device call (nvidia-h200), carry [".device-kit"], ~5 minutes (the 27B is written by models.sh first):
    source .device-kit/setup.sh && bash .ci/gpu/models.sh q27 && python .ci/gpu/batch_gain.py
Results: $OUT/batch-gain.json and one line per N on stdout; it must show the gain at the suite's concurrency
(2026-12-01, 256-token streams: 290 / 68 = 4.3 at 8).
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from autoresearch.ground.servers import ServerSpec
from eval.suites import get_suite
from search_space import SpaceContext, baseline_params, build_space, config_from_params, read_model_info

MODEL = Path(os.environ.get("MODEL27", "/tmp/q27"))
OUT = Path(os.environ.get("OUT", "/tmp/out"))
ANSWER_TOKENS = int(os.environ.get("ANSWER_TOKENS", "1024"))
PROMPT = "Solve step by step: a train leaves at 3 pm at 80 km/h; another at 4 pm at 100 km/h. When does it catch up?"


def _stream(url: str, tokens: int) -> int:
    body = {"prompt": PROMPT, "max_tokens": tokens, "ignore_eos": True, "temperature": 0.0}
    r = httpx.post(f"{url}/v1/completions", json=body, timeout=1800)  # the synthetic 27B has no chat template
    r.raise_for_status()
    return int(r.json()["usage"]["completion_tokens"])


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    concurrency = get_suite("offline").max_concurrent
    space = build_space(SpaceContext(engine="exllamav3", model=read_model_info(MODEL)), pinned={"cache_tokens": 32768})
    config = config_from_params(space, baseline_params(space, {}))
    spec = ServerSpec(model_dir=MODEL, log_dir=OUT / "logs", pid_dir=Path("/tmp/batch-gain-pids"),
                      vram_limit_bytes=24 * 2**30)
    rows = []
    with spec.launch(config, "batch-gain") as server:
        _stream(server.url, 16)  # warm-up
        for n in sorted({1, 4, concurrency, 16}):
            started = time.perf_counter()
            with ThreadPoolExecutor(n) as pool:
                tokens = sum(pool.map(lambda _: _stream(server.url, ANSWER_TOKENS), range(n)))
            seconds = time.perf_counter() - started
            rows.append({"streams": n, "tokens": tokens, "seconds": round(seconds, 2),
                         "aggregate_tok_s": round(tokens / seconds, 1)})
    base = rows[0]["aggregate_tok_s"]
    for row in rows:
        row["gain"] = round(row["aggregate_tok_s"] / base, 2)
        print(f"{row['streams']:3d} streams: {row['aggregate_tok_s']:7.1f} tok/s aggregate, gain {row['gain']:.2f}"
              + ("  <- the offline suite's concurrency: --batch-gain" if row["streams"] == concurrency else ""))
    (OUT / "batch-gain.json").write_text(json.dumps({"model": str(MODEL), "answer_tokens": ANSWER_TOKENS,
                                                     "vram_cap_gib": 24, "config": config.to_dict(), "rows": rows},
                                                    indent=1))


if __name__ == "__main__":
    main()
