"""GPU machine: does a prompt longer than any before stall the server, and does a warm Triton cache cure it?

Launches `python -m serving` on /tmp/q27 LAUNCHES times in a row (same Triton cache) and sends one-token
prefills of the given lengths, unique prompts, timing each; writes $OUT/probe.json and the server logs.
Set TRITON_CACHE_DIR to a fresh folder for a cold first launch, TRITON_PRINT_AUTOTUNING=1 to log tuning.

    python .ci/gpu/stall_probe.py LAUNCHES LENGTH,LENGTH,... ['{"max_chunk_size": 4096}']
"""

import json
import os
import sys
import time
from pathlib import Path

import httpx

from benchmarks.overhead import _prompt
from serving.config import ServingConfig
from serving.launcher import LaunchSpec, free_port, launch
from serving.textcodec import TextCodec


def main() -> None:
    model = Path("/tmp/q27")
    out = Path(os.environ.get("OUT", "/tmp/out"))
    codec = TextCodec(model)
    lengths = [int(x) for x in sys.argv[2].split(",")]
    args = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    config = ServingConfig.from_dict({"engine": "exllamav3", "args": args})
    results = []
    for launch_no in range(int(sys.argv[1])):
        spec = LaunchSpec(
            model_dir=model,
            config=config,
            port=free_port(),
            vram_limit_bytes=24 * 1024**3,
            log_path=out / f"probe-server-{launch_no}.log",
            startup_timeout_s=900,
        )
        t0 = time.time()
        with launch(spec) as server, httpx.Client(timeout=600) as client:
            print(f"launch {launch_no}: up in {time.time() - t0:.1f} s", flush=True)
            for i, n in enumerate(lengths):
                ids = _prompt(codec, n, salt=launch_no * 1000 + i + 7)
                t = time.perf_counter()
                body = {"prompt": ids, "max_tokens": 1, "temperature": 0, "ignore_eos": True}
                usage = client.post(server.url + "/v1/completions", json=body).json()["usage"]
                rec = {
                    "launch": launch_no,
                    "n": n,
                    "wall_s": round(time.perf_counter() - t, 3),
                    "prefill_s": usage["timings"]["prefill_s"],
                    "cached": usage["prompt_tokens_details"]["cached_tokens"],
                    "unix": time.time(),
                }
                results.append(rec)
                print(rec, flush=True)
    (out / "probe.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
