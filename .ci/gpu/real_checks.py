"""GPU machine, real model: the engine's fault isolation on real weights, then decode with and without
n-gram drafting per prompt kind. Results go to $OUT (real-checks.json, bench-*.json).

    source .device-kit/setup.sh && python .ci/gpu/real_checks.py /tmp/real-model/exl3-4.0
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from serving.config import ServingConfig
from serving.engine import FinishEvent, GenerationRequest, ScoreRequest
from serving.launcher import LaunchSpec, free_port, launch

OUT = Path(os.environ.get("OUT", "/tmp/out"))


def engine_isolation(model: Path) -> dict:
    """A job exllamav3 refuses (longer than its cache) fails alone; the next job is served."""
    from serving.__main__ import build_engine

    config = ServingConfig.from_dict({"engine": "exllamav3", "args": {"cache_tokens": 8192}})
    engine = build_engine(config, model)
    engine.start()
    engine.ready.wait()
    assert engine.failed is None, engine.failed

    async def run():
        too_big = ScoreRequest(prompt_ids=(5,) * 40000, decode_from=1)
        events = [e async for e in engine.generate(too_big)]
        ok = [e async for e in engine.generate(GenerationRequest(prompt_ids=(5, 6, 7, 8), max_new_tokens=8,
                                                                   ignore_eos=True))]
        return events[-1], ok[-1]

    big, ok = asyncio.run(run())
    engine.stop()
    return {"too_big_error": big.error, "next_job_tokens": ok.usage.completion_tokens,
            "next_job_error": ok.error, "engine_failed": repr(engine.failed), "isolated":
            isinstance(big, FinishEvent) and big.error is not None and ok.error is None
            and ok.usage.completion_tokens == 8}


def over_http(model: Path) -> dict:
    """The issue's request over HTTP: refused with a 400, /health stays truthful, the next request works."""
    spec = LaunchSpec(model_dir=model, config=ServingConfig.from_dict({"engine": "exllamav3"}), port=free_port(),
                      log_path=Path("/tmp/real-checks/server.log"))
    out = {}
    with launch(spec) as server:
        url = server.url
        out["health_before"] = httpx.get(url + "/health").json()
        r = httpx.post(url + "/v1/completions", json={"prompt": [5] * 40000, "echo": True, "max_tokens": 0,
                                                      "logprobs": 0}, timeout=120)
        out["defect1_status"], out["defect1_error"] = r.status_code, r.json().get("error")
        out["health_after"] = httpx.get(url + "/health").json()
        chat = httpx.post(url + "/v1/chat/completions", timeout=120, json={
            "messages": [{"role": "user", "content": "What is 2 + 3?"}], "max_tokens": 16, "temperature": 0})
        out["next_status"], out["next_text"] = chat.status_code, chat.json()["choices"][0]["message"]["content"]
        out["cached_tokens_of_next"] = chat.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
    return out


def drafting_table(model: Path) -> list[dict]:
    rows = []
    for name, args in (("defaults", {}), ("ngram", {"draft_mode": "ngram", "ngram_match_min": 2,
                                                     "num_draft_tokens": 4})):
        spec = LaunchSpec(model_dir=model, config=ServingConfig.from_dict({"engine": "exllamav3", "args": args}),
                          port=free_port(), log_path=Path(f"/tmp/real-checks/{name}.log"))
        with launch(spec) as server:
            path = OUT / f"bench-{name}.json"
            subprocess.run([sys.executable, "-m", "bench", "--url", server.url, "--prefill", "8192", "--decode", "1024",
                            "--decode-kinds", "math,code,mc", "--decode-tokens", "256", "--max-repeats", "6",
                            "--json", str(path)], check=True, stdout=subprocess.DEVNULL)
        result = json.loads(path.read_text())
        for point in result["decode"]:
            rows.append({"config": name, "kind": point["kind"], "decode_tok_per_s_client":
                         (point["decode_tok_per_s_client"] or {}).get("median"),
                         "spec_acceptance": point["spec_acceptance"], "valid_runs": point["valid_runs"],
                         "invalid_reasons": point["invalid_reasons"]})
        rows.append({"config": name, "kind": "prefill@8192", "prefill_tok_per_s_server":
                     (result["prefill"][0]["prefill_tok_per_s_server"] or {}).get("median"),
                     "shared_prefix_tokens": result["server"]["shared_prefix_tokens"],
                     "invalid_reasons": result["prefill"][0]["invalid_reasons"]})
    return rows


def main() -> int:
    model = Path(sys.argv[1])
    OUT.mkdir(parents=True, exist_ok=True)
    Path("/tmp/real-checks").mkdir(exist_ok=True)
    report: dict = {}
    for name, step in (("engine_isolation", engine_isolation), ("over_http", over_http),
                       ("drafting", drafting_table)):
        started = time.perf_counter()
        try:
            report[name] = step(model)
        except Exception as exc:  # one failed check must not hide the others' results
            report[name] = {"error": f"{type(exc).__name__}: {exc}"}
        report[name + "_s"] = round(time.perf_counter() - started, 1)
        (OUT / "real-checks.json").write_text(json.dumps(report, indent=1))
        print(name, json.dumps(report[name])[:1500], flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
