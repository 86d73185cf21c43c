"""A suite's tasks as a bench workload: what the decode objective is measured on.

The glue between two peers (eval's suites, bench's Workload), so it lives in autoresearch, which
imports both; bench and eval never import each other.

Each taskset of the suite is one decode kind. The offline tasksets give their own tasks (the first
`per_kind` in run order, with the taskset's system prompt); the Prime tasksets' data lives behind
`python -m eval data` and Docker, so each is stood in for by bench's bundled corpus of the same kind
(AIME: math, MMLU-Pro and I3 logic: multiple choice, LiveCodeBench: code), and the workload says so
per kind (`proxy`). Weights are the tasksets' planned task counts (tasks x rollouts), so the decode
objective weights the kinds as the suite does; a suite whose sizes are known only after a run weights
its tasksets equally and says so. The suite's thinking switch travels as a request field.

Usage:
    wl = suite_workload(get_suite("offline"), per_kind=64)
    wl.save(Path("workload-offline.json"))      # python -m bench --workload workload-offline.json ...
    python -m autoresearch workload --suite offline --out workload.json [--per-kind 64] [--limit N]
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Sequence
from pathlib import Path

from bench import BenchConfigError, Workload, WorkloadKind
from bench.corpus import CorpusItem, load_corpus
from eval.errors import EvalConfigError
from eval.suites import SuiteOverrides, SuiteSpec, TasksetSpec, apply_overrides, get_suite

__all__ = ["PROXY_KINDS", "command", "suite_workload"]

# bench corpus kind standing in for a Prime taskset whose tasks are not on this machine
PROXY_KINDS = {"aime24": "math", "aime25": "math", "aime26": "math", "mmlu-pro": "mc", "i3-logic": "mc",
               "livecodebench": "code"}
DEFAULT_PER_KIND = 64


def suite_workload(suite: SuiteSpec, *, per_kind: int = DEFAULT_PER_KIND) -> Workload:
    """The suite's decode workload: one kind per taskset.

    Raises:
        EvalConfigError: a taskset with no known source of tasks, or fewer than 2 tasks.
    """
    if per_kind < 2:
        raise EvalConfigError(f"a workload needs at least 2 tasks per kind, got per_kind={per_kind}")
    sizes = [t.planned_tasks for t in suite.tasksets]
    known = all(n is not None for n in sizes)
    kinds = tuple(
        _kind(spec, per_kind, weight=(n * spec.rollouts) if known else 1.0)
        for spec, n in zip(suite.tasksets, sizes, strict=True)
    )
    weighting = "weights: planned tasks x rollouts" if known else "weights: equal (task counts known only after a run)"
    return Workload(
        name=f"suite-{suite.name}",
        kinds=kinds,
        request_fields={"chat_template_kwargs": {"enable_thinking": suite.sampling.enable_thinking}},
        description=f"the {suite.name} suite's tasks, up to {per_kind} per taskset; {weighting}",
    )


def _kind(spec: TasksetSpec, per_kind: int, *, weight: float) -> WorkloadKind:
    knobs = dict(spec.knobs)
    if spec.taskset_id == "eval-logic":
        from eval.tasksets.logic import DEFAULT_GENERATORS, task_rows

        generators = knobs.get("generators", DEFAULT_GENERATORS)
        size = int(knobs.get("size_per_generator", 10))
        rows = list(itertools.islice(task_rows(generators, size, spec.seed), per_kind))  # generated lazily
    elif spec.taskset_id == "eval-mmath":
        from eval.tasksets.mmath import task_rows

        rows = list(task_rows(knobs.get("data_source", "AIME2025")))
    elif spec.taskset_id in PROXY_KINDS:
        corpus_kind = PROXY_KINDS[spec.taskset_id]
        items = load_corpus()[corpus_kind][:per_kind]
        return WorkloadKind(
            name=spec.name, weight=weight, proxy=f"bench corpus '{corpus_kind}' (the taskset's data needs the Hub)",
            items=tuple(CorpusItem(id=i.id, kind=spec.name, text=i.text, answer=i.answer) for i in items),
        )
    else:
        raise EvalConfigError(f"{spec.name}: no workload source for taskset {spec.taskset_id!r}")
    rows = rows[: max(2, min(per_kind, spec.limit or len(rows)))]  # a suite shrunk to 1 task still gives 2
    if len(rows) < 2:
        raise EvalConfigError(f"{spec.name}: {len(rows)} task(s); a workload kind needs at least 2")
    systems = {r.get("system_prompt") for r in rows}
    if len(systems) != 1:
        raise EvalConfigError(f"{spec.name}: tasks with different system prompts; one per kind is supported")
    return WorkloadKind(
        name=spec.name, weight=weight, system=systems.pop(),
        items=tuple(CorpusItem(id=r["id"], kind=spec.name, text=r["prompt"], answer=r["answer"]) for r in rows),
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m autoresearch workload",
                                     description="write a suite's tasks as a bench workload (what decode is measured on)")
    parser.add_argument("--suite", required=True, help="suite name, e.g. offline")
    parser.add_argument("--per-kind", type=int, default=DEFAULT_PER_KIND, help="tasks per taskset (default 64)")
    parser.add_argument("--limit", type=int, help="tasks per taskset the suite runs (as --suite-limit)")
    parser.add_argument("--out", type=Path, required=True, help="the workload JSON to write")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug lines on the terminal")
    return parser


def command(args: argparse.Namespace) -> int:
    """Write the workload; a suite that gives none is exit status 1 with the reason on stderr."""
    try:
        workload = suite_workload(apply_overrides(get_suite(args.suite), SuiteOverrides(limit=args.limit)),
                                  per_kind=args.per_kind)
    except (BenchConfigError, EvalConfigError) as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    workload.save(args.out)
    weights = ", ".join(f"{k} {w:.2f}" for k, w in workload.weights().items())
    print(f"{args.out}: {workload.name}, sha256 {workload.sha256[:16]}, weights {weights}")
    for kind in workload.kinds:
        print(f"  {kind.name}: {len(kind.items)} tasks" + (f" (proxy: {kind.proxy})" if kind.proxy else ""))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return command(build_parser().parse_args(argv))
