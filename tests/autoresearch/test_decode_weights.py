"""The decode objective weighs each kind by its workload share; a kind the workload does not weigh is an
error, never a weight of its own."""

from __future__ import annotations

import dataclasses

import pytest

from autoresearch.ground.plan import default_bench_plan
from autoresearch.measures.objectives import decode_weights, objectives_from_bench

from .fakes import bench_result

WORKLOAD = {"name": "w", "sha256": "0" * 64, "weights": {"rg-math": 0.25, "logic": 0.75}}


def _plan(kinds: tuple[str, ...], workload: dict | None):
    return dataclasses.replace(default_bench_plan("exllamav3"), decode_context_tokens=(1024,), decode_kinds=kinds,
                               workload=workload)


def test_each_decode_point_weighs_its_kinds_share():
    weights = decode_weights(bench_result(_plan(("rg-math", "logic"), WORKLOAD), 100.0, 1000.0))
    assert weights == {"decode_tok_per_s_client@1024/rg-math": 0.25, "decode_tok_per_s_client@1024/logic": 0.75}


def test_without_a_workload_every_point_weighs_the_same():
    weights = decode_weights(bench_result(_plan(("math", "code"), None), 100.0, 1000.0))
    assert set(weights.values()) == {1.0} and len(weights) == 2


def test_a_kind_missing_from_the_workload_is_an_error_not_a_weight_of_one():
    # a plan checks its kinds against its workload; a stored result (or a plan made otherwise) may not match
    three = {**WORKLOAD, "weights": {"rg-math": 0.2, "logic": 0.6, "code": 0.2}}
    measured = bench_result(_plan(("rg-math", "logic", "code"), three), 100.0, 1000.0)
    result = dataclasses.replace(measured, plan={**measured.plan, "workload": WORKLOAD})
    with pytest.raises(ValueError, match=r"decode kind\(s\) code are not in the bench plan's workload"):
        decode_weights(result)
    with pytest.raises(ValueError, match="code"):
        objectives_from_bench(result)
