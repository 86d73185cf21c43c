"""Speed measurement of any OpenAI-compatible server: a cold prefill (TTFT) ladder and batch-1 decode,
with warm-up, repeats to a target spread, prefix-cache defeat, NVML state, and a noise-aware rule
for calling two configurations different.

Usage (the autoresearch loop):
    from bench import BenchPlan, run_bench, compare, noise_floor
    from openai_client import Endpoint
    result = run_bench(BenchPlan(prefill_tokens=(8192,), decode_context_tokens=(1024, 8192)),
                       Endpoint(url=server.url))
    store(result.to_dict())                                   # JSON-able, for results.db
    floor = noise_floor(first_launch.samples(), second_launch.samples())
    verdicts = compare(baseline.samples(), result.samples(), noise_floor=floor)

The transport is the project's one client for OpenAI-compatible servers (`openai_client`: Client,
Endpoint and the errors of a server that does not answer as it should); bench times its streams
(`bench.timing`).

CLI: python -m bench --url URL [--prefill 1024,8192,32768] [--decode 1024,8192] [--json OUT]
"""

from bench.corpus import KINDS, PromptKind
from bench.errors import BenchConfigError, BenchError, CorpusError, MissingMetric
from bench.ladder import mark_stalls, run_bench, validate_run
from bench.plan import BenchPlan
from bench.records import (
    BenchResult,
    DecodePoint,
    GpuIdentity,
    GpuWindow,
    PrefillPoint,
    RequestResult,
    RequestSpec,
    ServerProfile,
)
from bench.stats import (
    Comparison,
    DifferenceRule,
    NoiseFloor,
    Summary,
    compare,
    compare_one,
    find_stalls,
    noise_floor,
    summarize,
)
from bench.workload import Workload, WorkloadKind

__all__ = [
    "KINDS",
    "Workload",
    "WorkloadKind",
    "BenchConfigError",
    "BenchError",
    "BenchPlan",
    "BenchResult",
    "Comparison",
    "CorpusError",
    "DecodePoint",
    "DifferenceRule",
    "GpuIdentity",
    "GpuWindow",
    "MissingMetric",
    "NoiseFloor",
    "PrefillPoint",
    "PromptKind",
    "RequestResult",
    "RequestSpec",
    "ServerProfile",
    "Summary",
    "compare",
    "compare_one",
    "find_stalls",
    "mark_stalls",
    "noise_floor",
    "run_bench",
    "summarize",
    "validate_run",
]
