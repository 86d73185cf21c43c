"""The rates a night plan is made from: stated by the user (flags), assumed, or measured by the study so far
(its trials' stage times, the baseline's bench, the baseline's and the judgments' answering spans).
autoresearch.night.forecast turns them into the plan.

The batching gain (aggregate decode at the suite's requests in flight over batch-1 decode) divides the task
tier's time. Where it is neither stated nor measured yet, the plan takes this project's measurement on the
model's shape (SHAPE_GAINS, at the suite's concurrency), and says so; a shape never measured is planned at 1.

Usage:
    rates = stated_rates(suite, decode_tok_s=43, prefill_tok_s=700, answer_tokens=3000, batch_gain=4.1)
    rates = measured_rates(study.get_trials(), suite_runs, suite, fallback=rates)
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from autoresearch.ground.study import is_baseline
from eval.suites import SuiteSpec

__all__ = ["BASELINE_STAGES", "CHEAP_STAGES", "PROJECT_SHAPE", "SHAPE_GAINS", "UNKNOWN_TASKS", "Rates", "ShapeGain",
           "TasksetRates", "assumed_gain", "measured_rates", "shape_of", "stated_rates"]

UNKNOWN_TASKS = 600  # a taskset whose size is known only after a run is planned at the offline suite's size
CHEAP_STAGES = ("launch", "bench", "fidelity")


@dataclass(frozen=True, kw_only=True)
class TasksetRates:
    name: str
    tasks: int | None  # the taskset's size where known before running
    max_tokens: int
    answered_tokens: float  # mean tokens per answer, after the budget
    truncated_share: float  # answers that hit the budget
    task_s: float  # wall seconds per task at the suite's concurrency
    call_s: float = 0.0  # fixed seconds of one answering call (its verifiers worker's start), measured
    walks: tuple[int, ...] = ()  # tasks each judged candidate's walk took, measured (empty: the design's curve)
    answered: int = 0  # tasks the baseline has answered so far (its first answers and the judgments' since)


@dataclass(frozen=True, kw_only=True)
class Rates:
    launch_s: float
    bench_s: float
    fidelity_s: float
    tasksets: tuple[TasksetRates, ...]
    source: str  # where the numbers come from, printed with the plan
    assumptions: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ShapeGain:
    """The batching gain this project measured on one model shape, by requests in flight."""

    name: str  # said with the plan
    hidden_size: int
    layers: int
    intermediate_size: int
    points: tuple[tuple[int, float], ...]  # (requests in flight, gain), increasing
    source: str  # where the measurement is kept

    def at(self, in_flight: int) -> float:
        """The gain at `in_flight` requests: linear between the measured points, the last one past them."""
        below = max((p for p in self.points if p[0] <= in_flight), default=self.points[0])
        above = min((p for p in self.points if p[0] >= in_flight), default=self.points[-1])
        if above[0] == below[0]:
            return below[1]
        return below[1] + (above[1] - below[1]) * (in_flight - below[0]) / (above[0] - below[0])


SHAPE_GAINS = (
    ShapeGain(name="the 27B's shape (Qwen3.8-27B: hidden 5,120, 64 layers), under a 24 GiB cap", hidden_size=5120,
              layers=64, intermediate_size=17408, points=((1, 1.0), (4, 2.95), (8, 4.11), (16, 4.40)),
              source="examples/synthetic-27b-batch-gain"),
    ShapeGain(name="the 0.5B's shape (Qwen2.5-Coder-0.5B: hidden 896, 24 layers), on an H200", hidden_size=896,
              layers=24, intermediate_size=4864, points=((1, 1.0), (8, 2.9)),
              source="examples/real-0.5b-night"),
)
PROJECT_SHAPE = SHAPE_GAINS[0]  # the model this project serves: what `plan` assumes, with no model to read


def shape_of(hidden_size: int, layers: int, intermediate_size: int) -> ShapeGain | None:
    """The measured shape with these dimensions, if any."""
    return next((g for g in SHAPE_GAINS if (g.hidden_size, g.layers, g.intermediate_size) ==
                 (hidden_size, layers, intermediate_size)), None)


def assumed_gain(shape: ShapeGain | None, in_flight: int) -> tuple[float, str]:
    """The batching gain a plan takes where none is stated or measured yet, and why (printed with the plan)."""
    if shape is None:
        return 1.0, "no measured value for this model's shape: the baseline's answers measure it"
    return round(shape.at(in_flight), 1), f"measured on {shape.name}: {shape.source}"


def stated_rates(suite: SuiteSpec, *, decode_tok_s: float, prefill_tok_s: float, answer_tokens: float,
                 prompt_tokens: float = 300.0, batch_gain: float = 1.0, launch_s: float = 120.0,
                 bench_s: float = 180.0, fidelity_s: float = 120.0, source: str = "stated rates",
                 gain_basis: str = "") -> Rates:
    """Rates for a machine one does not have: its decode and prefill tok/s and the model's answer length;
    `gain_basis`: where the batching gain comes from, printed with it.

    Raises:
        ValueError: a rate or length that is not positive.
    """
    for name, value in (("decode tok/s", decode_tok_s), ("prefill tok/s", prefill_tok_s),
                        ("answer tokens", answer_tokens), ("batch gain", batch_gain)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be > 0, got {value}")
    tasksets = []
    for spec in suite.tasksets:
        budget = spec.max_tokens
        truncated = math.exp(-budget / answer_tokens)
        answered = answer_tokens * (1.0 - truncated)  # E[min(X, B)], X exponential with mean A
        task_s = spec.rollouts * (prompt_tokens / prefill_tok_s + answered / decode_tok_s) / batch_gain
        tasksets.append(TasksetRates(name=spec.name, tasks=spec.planned_tasks, max_tokens=budget,
                                     answered_tokens=answered, truncated_share=truncated, task_s=task_s))
    assumptions = (f"answers of {answer_tokens:.0f} tokens on average, lengths exponential (a stated assumption)",
                   f"{prompt_tokens:.0f}-token prompts; batch gain {batch_gain:g} (aggregate over batch-1 decode "
                   f"at the suite's {suite.max_concurrent} requests in flight{'; ' + gain_basis if gain_basis else ''})",
                   f"launch {launch_s:.0f} s, bench {bench_s:.0f} s, fidelity {fidelity_s:.0f} s per trial")
    return Rates(launch_s=launch_s, bench_s=bench_s, fidelity_s=fidelity_s, tasksets=tuple(tasksets),
                 source=f"{source}: decode {decode_tok_s:g} tok/s, prefill {prefill_tok_s:g} tok/s",
                 assumptions=assumptions)


def _answering_span(taskset: dict) -> float | None:
    """Wall seconds from the first request to the last answer of one answering call, from its episodes'
    start times and model times; None for records without them."""
    episodes = taskset.get("episodes") or []
    if not episodes or any(e.get("started_at") is None or e.get("model_time_s") is None for e in episodes):
        return None
    return max(e["started_at"] + e["model_time_s"] for e in episodes) - min(e["started_at"] for e in episodes)


# A candidate's cheap stage, as the baseline's trial times it: its second launch and bench, which start with
# the model's files in the page cache and the kernels compiled, as every candidate's do (on the real 0.5B the
# first launch took 22 s against 8, its bench 20 s against 9: one-time compiles), and its noise floor, the
# same measurement as a candidate's fidelity stage. "reference" stands in for records from before the split
# (capturing the reference logits, a slower measurement).
BASELINE_STAGES = {"launch": ("relaunch",), "bench": ("bench again",), "fidelity": ("noise floor",)}
_BASELINE_STAGES_BEFORE_THE_SPLIT = {"launch": ("launch",), "bench": ("bench",), "fidelity": ("reference",)}


def _stage_samples(trials: Sequence) -> dict[str, list[float]]:
    """Each cheap stage's seconds from the candidates' trials and the baseline's matching stage (one sample
    among them: a first candidate of a new kind pays its own one-time compiles, and alone it would set the plan)."""
    out: dict[str, list[float]] = {}
    for name in CHEAP_STAGES:
        out[name] = [t.user_attrs["stage_s"][name] for t in trials if t.user_attrs.get("role") == "candidate"
                     and name in (t.user_attrs.get("stage_s") or {})]
        for t in trials:
            stages = t.user_attrs.get("stage_s") or {}
            if is_baseline(t):
                names = BASELINE_STAGES if "relaunch" in stages else _BASELINE_STAGES_BEFORE_THE_SPLIT
                out[name] += [stages[n] for n in names[name] if n in stages]
    return out


def measured_rates(trials: Sequence, suite_runs: Sequence, suite: SuiteSpec, *, fallback: Rates) -> Rates:
    """The rates a study measured: stage times from its candidates' `stage_s` records (medians; the baseline's
    matching stages until a candidate has timed its own: BASELINE_STAGES), and from the baseline's suite runs
    (`suite_runs`: dicts with "tasksets" as stored, and "elapsed_s") answer lengths, truncations, seconds per
    task (the answering span: first request to last answer, at the suite's concurrency) and the fixed cost
    of an answering call (the run's elapsed time outside its spans, per taskset). What was not measured yet
    comes from `fallback`."""
    measured = {name: statistics.median(v) for name, v in _stage_samples(trials).items() if v}
    per_taskset: dict[str, dict] = {}
    call_s: list[float] = []
    for run in suite_runs:
        elapsed, tasksets = run.get("elapsed_s"), run.get("tasksets") or []
        total_tasks = sum(t["tasks"] for t in tasksets) or 0
        spans = [_answering_span(t) for t in tasksets]
        timed = bool(tasksets) and all(s is not None for s in spans)
        if elapsed and timed:
            call_s.append(max(elapsed - sum(spans), 0.0) / len(tasksets))
        for t, span in zip(tasksets, spans, strict=True):
            acc = per_taskset.setdefault(t["name"], {"tasks": 0, "rollouts": 0, "tokens": 0, "truncations": 0,
                                                     "seconds": 0.0})
            acc["tasks"] += t["tasks"]
            acc["rollouts"] += t["rollouts"]
            acc["tokens"] += t["output_tokens"]
            acc["truncations"] += t["truncations"]
            if timed:
                acc["seconds"] += span
            elif elapsed and total_tasks:  # records without start times: the run's wall time shared by its tasks
                acc["seconds"] += elapsed * t["tasks"] / total_tasks
    call = statistics.median(call_s) if call_s else 0.0
    tasksets, known = [], []
    for old in fallback.tasksets:
        acc = per_taskset.get(old.name)
        if not acc or not acc["rollouts"] or not acc["seconds"]:
            tasksets.append(old)
            continue
        known.append(old.name)
        tasksets.append(dataclasses.replace(old, answered_tokens=acc["tokens"] / acc["rollouts"],
                                            truncated_share=acc["truncations"] / acc["rollouts"],
                                            task_s=acc["seconds"] / acc["tasks"], call_s=call))
    parts = [f"{name} {measured[name]:.0f} s" for name in CHEAP_STAGES if name in measured]
    if measured:
        parts[-1] += " (medians of the candidates' and the baseline's second launch)"
    if known:
        parts.append(f"answers on {', '.join(known)}" + _batch_gain(trials, [per_taskset[n] for n in known]))
    if not parts:
        return fallback
    unmeasured = [n for n in CHEAP_STAGES if n not in measured] + [t.name for t in fallback.tasksets
                                                                  if t.name not in known]
    source = "rates measured by this study: " + ", ".join(parts)  # the plan's header: "...; <source>."
    if unmeasured:
        source += f" (not yet measured, from {fallback.source}: {', '.join(unmeasured)})"
    return dataclasses.replace(fallback, tasksets=tuple(tasksets), source=source,
                               assumptions=() if not unmeasured else fallback.assumptions,
                               **{f"{name}_s": value for name, value in measured.items()})


def _batch_gain(trials: Sequence, answered: list[dict]) -> str:
    """The batching gain the baseline's answers measured: their aggregate decode at the suite's concurrency (the
    answered tokens over the answering spans) over the baseline's batch-1 decode (its bench), said with the rates."""
    seconds, tokens = sum(a["seconds"] for a in answered), sum(a["tokens"] for a in answered)
    batch1 = next((t.user_attrs["decode_tok_per_s"] for t in trials if is_baseline(t)
                   and t.user_attrs.get("decode_tok_per_s")), None)
    if not seconds or not tokens or not batch1:
        return ""
    aggregate = tokens / seconds
    return (f" ({aggregate:.0f} tok/s aggregate at the suite's concurrency: a batching gain of {aggregate / batch1:.1f} "
            f"over batch-1 decode {batch1:.0f} tok/s, measured)")
