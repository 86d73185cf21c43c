"""eval: the intelligence gate. Fidelity against the baseline first, then task suites through verifiers.

Library API for the autoresearch loop (all measurement is over HTTP against any OpenAI-compatible
server; importing this package does not import verifiers):

    store = EvalStore("sqlite:///results.db")
    probes = build_probe_set(ProbeSetConfig())
    reference = capture_reference(url, probes, store=store, model_manifest_hash=h, label="baseline")
    floor = measure_fidelity(url2, reference, store=store, role="noise_floor", label="baseline#2")
    cand = measure_fidelity(url3, reference, store=store, role="candidate", label=digest)
    verdict = decide_fidelity(cand.metrics, floor.metrics, FidelityPolicy())
    suite = run_suite(get_suite("offline"), Endpoint(url=url3, model=m), store=store, label=digest)
    tasksets = [compare_taskset(b, c, TaskPolicy(), tasksets=len(base.tasksets)) for b, c in zip(base.tasksets, suite.tasksets)]
    decision = decide(fidelity=verdict, tasksets=tasksets)

CLI: `python -m eval setup | data NAME | run --suite NAME [--url URL | --dry-run] | fidelity ...`.
"""

from eval.decision import (
    Check,
    FidelityPolicy,
    FidelityVerdict,
    GateDecision,
    GatePolicy,
    TaskPolicy,
    TasksetVerdict,
    compare_taskset,
    decide,
    decide_fidelity,
    worst_case_floor,
)
from eval.errors import (
    DataIntegrityError,
    EndpointError,
    EvalConfigError,
    EvalError,
    LockError,
    MissingDataset,
    MissingEnvironment,
    MissingReference,
    ProbeMismatch,
    RuntimeUnavailable,
    SourceUnavailable,
    TasksetRunError,
)
from eval.fidelity import FidelityMeasurement, capture_reference, measure_fidelity
from eval.gate import GateRecord, gate_candidate, record_unjudged
from eval.probes import ProbeSet, ProbeSetConfig, build_probe_set
from eval.records import EpisodeOutcome, FidelityMetrics, Reference, SuiteResult, TasksetResult
from eval.runner import dry_run, preflight, run_suite
from eval.store import EvalStore
from eval.suites import SUITES, SuiteOverrides, SuiteSpec, apply_overrides, get_suite

__all__ = [
    "SUITES",
    "Check",
    "DataIntegrityError",
    "EndpointError",
    "EpisodeOutcome",
    "EvalConfigError",
    "EvalError",
    "EvalStore",
    "FidelityMeasurement",
    "FidelityMetrics",
    "FidelityPolicy",
    "FidelityVerdict",
    "GateDecision",
    "GatePolicy",
    "GateRecord",
    "LockError",
    "MissingDataset",
    "MissingEnvironment",
    "MissingReference",
    "ProbeMismatch",
    "ProbeSet",
    "ProbeSetConfig",
    "Reference",
    "RuntimeUnavailable",
    "SourceUnavailable",
    "SuiteOverrides",
    "SuiteResult",
    "SuiteSpec",
    "TaskPolicy",
    "TasksetResult",
    "TasksetRunError",
    "TasksetVerdict",
    "apply_overrides",
    "build_probe_set",
    "capture_reference",
    "compare_taskset",
    "decide",
    "decide_fidelity",
    "dry_run",
    "gate_candidate",
    "record_unjudged",
    "get_suite",
    "measure_fidelity",
    "preflight",
    "run_suite",
    "worst_case_floor",
]
