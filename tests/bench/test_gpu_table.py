"""Reproduce the table of ../shared/device/README.md with bench on the shape-true 27B (GPU only).

Each row launches `python -m serving` (exllamav3, 24 GiB cap) with that row's configuration, runs
bench's ladders against it over HTTP, and checks the server-timed medians against the README's
numbers (examples/bench-table-h200/reference.json) within the machine-to-machine bounds; the
whole table is then checked by `python -m bench reference`. Skipped without CUDA. On the GPU machine:

    source .device-kit/setup.sh && BENCH_OUT=$OUT python -m pytest -m gpu tests/bench/test_gpu_table.py -s

Without EXL3_27B_MODEL the fixture writes the checkpoint (about 15-30 s, 14.6 GiB in pytest's tmp);
with EXL3_27B_MODEL=/tmp/q27 it is written there once and reused by later calls.
BENCH_OUT, when set, receives one bench JSON per row. Rows take 1.5-2 minutes each; to stay within one
10-minute device call run them in two calls: `-k "defaults or fp16 or chunk8192"`, then
`-k "cache8 or cache4 or int8gemv0"` (keep EXL3_27B_MODEL=/tmp/q27 so the checkpoint is written once).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench import BenchPlan, BenchResult, run_bench
from bench.reference import ReferenceTable, check_reference
from openai_client import Endpoint

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.slow,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

GIB = 1024**3
TABLE_PATH = Path(__file__).parents[2] / "examples" / "bench-table-h200" / "reference.json"
# row id: (serving args, env); the published numbers are in TABLE_PATH (the device README's table)
ROWS = {
    "defaults": ({}, {}),
    "chunk4096-fp16": ({"max_chunk_size": 4096}, {}),
    "chunk8192": ({"max_chunk_size": 8192}, {}),
    "chunk4096-cache8": (
        {"max_chunk_size": 4096, "cache_kind": "quant", "cache_k_bits": 8, "cache_v_bits": 8},
        {},
    ),
    "chunk4096-cache4": (
        {"max_chunk_size": 4096, "cache_kind": "quant", "cache_k_bits": 4, "cache_v_bits": 4},
        {},
    ),
    "chunk4096-int8gemv0": ({"max_chunk_size": 4096}, {"EXL3_INT8_GEMV": "0"}),
}

PLAN = BenchPlan(
    prefill_tokens=(8192,),
    decode_context_tokens=(1024, 8192),
    decode_kinds=("math",),
    decode_tokens=256,
    min_repeats=3,
    max_repeats=6,
    warmup_requests=2,
    gpu_index=0,
)


@pytest.fixture(scope="session")
def q27_dir(tmp_path_factory) -> Path:
    from serving.synthetic.exl3 import QWEN38_27B, write_exl3_checkpoint

    target = os.environ.get("EXL3_27B_MODEL")
    if target and (Path(target) / "SYNTHETIC.json").exists():  # written last: the checkpoint is whole
        return Path(target)
    out = Path(target) if target else tmp_path_factory.mktemp("q27") / "q27"
    return write_exl3_checkpoint(out, QWEN38_27B, bits=4.0, head_bits=6)


def _measure(row: str, model_dir: Path, log_dir: Path) -> BenchResult:
    from serving.config import ServingConfig
    from serving.launcher import LaunchSpec, free_port, launch

    args, env, *_ = ROWS[row]
    config = ServingConfig.from_dict({"engine": "exllamav3", "args": args, "env": env})
    spec = LaunchSpec(
        model_dir=model_dir,
        config=config,
        port=free_port(),
        log_path=log_dir / f"{row}.log",
        vram_limit_bytes=24 * GIB,
        startup_timeout_s=900,
    )
    with launch(spec) as server:
        result = run_bench(PLAN, Endpoint(url=server.url))
    out = os.environ.get("BENCH_OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / f"bench-{row}.json").write_text(json.dumps(result.to_dict(), indent=1))
    return result


@pytest.mark.parametrize("row", list(ROWS))
def test_bench_reproduces_the_device_readme_row(row, q27_dir, tmp_path):
    """One row, alone: clean runs, and each median within the table's machine bounds of the published value.

    Whether the rows together reproduce the table (one machine factor, each row within noise of it) is
    `python -m bench reference` over all six JSONs; .ci/gpu/bench-table.sh runs it after part 2.
    """
    table = ReferenceTable.from_json(TABLE_PATH)
    result = _measure(row, q27_dir, tmp_path)
    check = check_reference(table, {row: result})
    lo, hi = table.factor_bounds
    report = "\n".join(
        f"{row} {r.metric}: {r.measured:,.1f} = {r.measured / sum(r.published) * 2:.3f} x published"
        for r in check.rows
    )
    print("\n" + report)
    reasons = [why for p in (*result.prefill, *result.decode) for why in p.invalid_reasons]
    assert all(why.startswith("stall:") for why in reasons), reasons  # only one-time compiles are dropped
    assert all(r.cached_tokens == 0 for p in result.prefill for r in p.runs)
    assert result.gpu is not None and all(r.gpu is not None for p in result.prefill for r in p.runs)
    assert not check.missing, check.missing
    for r in check.rows:
        tol = table.floors[r.metric.split("@")[0]]
        assert lo * (1 - tol) <= r.measured / r.published[1] and r.measured / r.published[0] <= hi * (
            1 + tol
        ), report
