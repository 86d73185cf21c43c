"""The gate as the loop calls it: a candidate's suite run must answer every taskset the baseline's did."""

from __future__ import annotations

import dataclasses

import pytest

from eval.decision import GatePolicy, TaskPolicy
from eval.errors import EvalConfigError
from eval.gate import gate_candidate
from eval.records import SuiteResult
from eval.store import EvalStore

from .test_decision import _big


def _suite(*tasksets) -> SuiteResult:
    return SuiteResult(suite="offline", run_dir="/runs/x", tasksets=tasksets)


def test_a_candidate_suite_missing_a_taskset_is_refused_unless_another_was_rejected(tmp_path):
    store = EvalStore(f"sqlite:///{tmp_path / 'results.db'}")
    base, cand = _big()
    logic_base, logic_cand = (dataclasses.replace(t, name="logic", taskset_id="logic") for t in (base, cand))
    kwargs = {"model_manifest_hash": "0" * 64, "candidate_label": "c", "baseline_label": "b",
              "policy": GatePolicy(tasks=TaskPolicy(mode="judge"))}
    with pytest.raises(EvalConfigError, match=r"no result for \['logic'\], and no taskset it ran was rejected"):
        gate_candidate(store, baseline_suite=_suite(base, logic_base), candidate_suite=_suite(cand), **kwargs)
    both = gate_candidate(store, baseline_suite=_suite(base, logic_base), candidate_suite=_suite(cand, logic_cand),
                          **kwargs)
    assert [t.name for t in both.decision.tasksets] == ["aime25", "logic"]
    _, losing = _big(lose_every=10)  # rejected on its first taskset: the run stopped there, rightly
    stopped = gate_candidate(store, baseline_suite=_suite(base, logic_base), candidate_suite=_suite(losing), **kwargs)
    assert not stopped.decision.passed
