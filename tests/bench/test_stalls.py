"""Stall detection (bench.stats.find_stalls, bench.ladder.mark_stalls) on runs recorded on the H200.

examples/bench-table-h200/ holds bench's records of the shape-true 27B. In three of its six rows the
second measured prefill ran 3.6-8 s instead of 1.2 s with the GPU 13-20% busy: the first prompt that
long made Triton compile a kernel (a second launch on the same machine, warm Triton cache, did not
stall at all: stall-probe.json). Those runs are not prefill speed and must not enter the median.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.ladder import mark_stalls
from bench.records import BenchResult
from bench.stats import find_stalls, summarize

RECORDS = Path(__file__).parents[2] / "examples" / "bench-table-h200"


def _record(row: str) -> BenchResult:
    return BenchResult.from_dict(json.loads((RECORDS / f"bench-{row}.json").read_text()))


def _prefill_runs(result: BenchResult):
    (point,) = result.prefill
    return point.runs


def test_the_recorded_compile_stall_is_found_and_nothing_else():
    runs = _prefill_runs(_record("defaults"))
    rates = [r.prefill_tok_per_s_client for r in runs]
    busy = [r.gpu.utilization_pct_mean for r in runs]
    stalls = find_stalls(rates, busy)
    assert list(stalls) == [1]  # 1,031 tok/s at 13% busy; the others 5,100-6,600 at 57-81%
    assert "13% busy" in stalls[1] and "kernel compile" in stalls[1]


def test_a_slow_run_with_a_busy_gpu_is_a_measurement_not_a_stall():
    rates = [6500.0, 2000.0, 6600.0, 6400.0]
    assert find_stalls(rates, [75.0, 74.0, 76.0, 73.0]) == {}
    assert list(find_stalls(rates, [75.0, 20.0, 76.0, 73.0])) == [1]


def test_no_telemetry_or_too_few_runs_decide_nothing():
    assert find_stalls([6500.0, 1000.0, 6600.0], [None, None, None]) == {}
    assert find_stalls([6500.0, 1000.0], [75.0, 10.0]) == {}  # one other run is no baseline
    assert find_stalls([6500.0, 1000.0, 6600.0], [75.0, None, 70.0]) == {}
    with pytest.raises(ValueError, match="3 rates but 2"):
        find_stalls([1.0, 2.0, 3.0], [1.0, 2.0])


@pytest.mark.parametrize("row", ["defaults", "chunk4096-cache8", "chunk4096-cache4"])
def test_mark_stalls_takes_the_stalled_run_out_of_the_recorded_median(row):
    before = _record(row)
    after = mark_stalls(before)
    runs = _prefill_runs(after)
    assert [i for i, r in enumerate(runs) if not r.is_valid] == [1]
    assert runs[1].invalid_reason.startswith("stall:")
    old = summarize(before.samples()["prefill_tok_per_s_server@8192"])
    new = summarize(after.samples()["prefill_tok_per_s_server@8192"])
    assert new.n == old.n - 1 and new.median > old.median and new.ci_low > 3 * old.ci_low
    assert after.samples().keys() == before.samples().keys()
    assert [d.runs for d in after.decode] == [d.runs for d in before.decode]  # decode had no stall
    assert mark_stalls(after) == after  # idempotent


@pytest.mark.parametrize("row", ["chunk4096-fp16", "chunk8192", "chunk4096-int8gemv0"])
def test_rows_without_a_stall_are_left_alone(row):
    result = _record(row)
    assert mark_stalls(result) == result
