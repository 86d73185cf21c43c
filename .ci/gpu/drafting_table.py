"""GPU machine, real model: decode per prompt kind and draft acceptance for each drafting setting.

    source .device-kit/setup.sh && python .ci/gpu/drafting_table.py /tmp/real-model/exl3-4.0 [CONTEXT ...]
    DRAFTER=/tmp/real-model/exl3-2.5 adds the autoregressive draft model; ONLY=a,b runs those settings only.
    WORKLOAD=FILE decodes on a bench workload (a suite's tasks by kind, `python -m autoresearch workload`) instead of
    bench's math/code/mc corpus; the rows then also carry the workload's weighted decode.
    CONFIG=NAME=FILE[,NAME=FILE] adds settings served from exported configs (`autoresearch export`).
    DECODE_UNTIL=length|eos|both (default length): bench's --decode-until; both measures each launch
    twice, the fixed length first, then the model's own answers. DECODE_TOKENS (default 256). PREFILL
    (default 8192; none to skip).

Writes $OUT/drafting.json (one row per setting, context and kind) and bench-<setting>[-eos].json records.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from serving.config import ServingConfig
from serving.launcher import LaunchSpec, free_port, launch

OUT = Path(os.environ.get("OUT", "/tmp/out"))
SETTINGS = {
    "defaults": {},
    "ngram-4": {"draft_mode": "ngram", "ngram_match_min": 2, "num_draft_tokens": 4},
    "ngram-8": {"draft_mode": "ngram", "ngram_match_min": 2, "num_draft_tokens": 8},
    "suffix-8": {"hybrid_draft_tokens": 8},
    "ngram-4-suffix-8": {"draft_mode": "ngram", "ngram_match_min": 2, "num_draft_tokens": 4, "hybrid_draft_tokens": 8},
}


def main() -> int:
    model, contexts = Path(sys.argv[1]), sys.argv[2:] or ["1024", "8192"]
    OUT.mkdir(parents=True, exist_ok=True)
    settings = dict(SETTINGS)
    if drafter := os.environ.get("DRAFTER"):  # a smaller copy of the model (BITS=2.5) as an autoregressive drafter
        settings["draft-model-4"] = {"draft_mode": "draft_model", "draft_model_dir": drafter, "num_draft_tokens": 4}
    configs = {n: ServingConfig.from_dict({"engine": "exllamav3", "args": a}) for n, a in settings.items()}
    for item in filter(None, os.environ.get("CONFIG", "").split(",")):
        name, _, file = item.partition("=")
        configs[name] = ServingConfig.from_dict(json.loads(Path(file).read_text()))
    if only := os.environ.get("ONLY"):
        configs = {k: v for k, v in configs.items() if k in only.split(",")}
    until = os.environ.get("DECODE_UNTIL", "length")
    modes = ("length", "eos") if until == "both" else (until,)
    rows = []
    for name, config in configs.items():
        spec = LaunchSpec(model_dir=model, config=config, port=free_port(), log_path=Path(f"/tmp/drafting/{name}.log"))
        source = ["--workload", os.environ["WORKLOAD"]] if os.environ.get("WORKLOAD") else ["--decode-kinds", "math,code,mc"]
        paths = {m: OUT / f"bench-{name}{'' if m == 'length' else '-' + m}.json" for m in modes}
        codes = {}
        try:
            with launch(spec) as server:
                for mode, path in paths.items():  # exit 1 with a record: a point went unmeasured, the rows say which
                    codes[mode] = subprocess.run([
                        sys.executable, "-m", "bench", "--url", server.url,
                        "--prefill", os.environ.get("PREFILL", "8192"), "--decode", ",".join(contexts),
                        *source, "--decode-tokens", os.environ.get("DECODE_TOKENS", "256"),
                        "--decode-until", mode, "--max-repeats", "5", "--json", str(path)],
                        stdout=subprocess.DEVNULL).returncode
        except Exception as exc:  # one setting that fails must not hide the others
            rows.append({"setting": name, "error": f"{type(exc).__name__}: {exc}"})
        for mode, code in codes.items():
            rows.extend(_rows(name, mode, paths[mode], code))
        (OUT / "drafting.json").write_text(json.dumps(rows, indent=1))
    for r in rows:
        print(json.dumps(r))
    return 0


def _rows(name: str, mode: str, path: Path, exit_code: int) -> list[dict]:
    """One setting's rows from one bench record: the weighted decode (on a workload), then each point."""
    if not path.exists():  # bench failed before writing a record
        return [{"setting": name, "decode_until": mode, "error": f"bench exited {exit_code} without a record"}]
    rows = []
    result = json.loads(path.read_text())
    if result["plan"].get("workload"):  # the decode objective as the loop computes it
        from autoresearch.measures.objectives import objectives_from_bench
        from bench import BenchResult

        try:
            weighted, _ = objectives_from_bench(BenchResult.from_dict(result))
        except Exception as exc:  # an unmeasured point: say which, keep the per-kind rows
            weighted = f"unmeasured: {exc}"
        rows.append({"setting": name, "decode_until": mode, "kind": "weighted", "decode_tok_per_s_client": weighted,
                     "weights": result["plan"]["workload"]["weights"]})
    for p in result["decode"]:
        tokens = [r["completion_tokens"] for r in p["runs"] if r.get("invalid_reason") is None]
        rows.append({"setting": name, "decode_until": mode, "context": p["context_tokens"], "kind": p["kind"],
                     "decode_tok_per_s_client": (p["decode_tok_per_s_client"] or {}).get("median"),
                     "completion_tokens": tokens,
                     "spec_acceptance": p.get("spec_acceptance"),
                     "spec_drafted_tokens": p.get("spec_drafted_tokens"),
                     "spec_accepted_tokens": p.get("spec_accepted_tokens"), "valid_runs": p["valid_runs"],
                     "invalid_reasons": p["invalid_reasons"]})
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
