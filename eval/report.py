"""Human and machine views of eval records: rich tables, and greppable `key: value` lines.

Fed only by records that are already stored; it computes nothing of its own.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from eval.decision import GateDecision
from eval.records import FidelityMetrics, SuiteResult

__all__ = ["print_decision", "print_fidelity", "print_suite", "suite_lines"]


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "n/a" if value is None else format(value, spec)


def suite_lines(result: SuiteResult) -> list[str]:
    """One `key: value` line per taskset statistic, e.g. `aime25.reward_mean: 0.333`."""
    lines = [f"suite: {result.suite}", f"run_dir: {result.run_dir}"]
    if result.suite_run_id is not None:
        lines.append(f"suite_run_id: {result.suite_run_id}")
    for t in result.tasksets:
        for key in (
            "tasks",
            "accuracy",
            "rollouts",
            "failures",
            "truncations",
            "reward_mean",
            "output_tok_per_s",
            "max_tokens",
        ):
            value = getattr(t, key)
            lines.append(f"{t.name}.{key}: {_fmt(value) if isinstance(value, float) else value}")
    return lines


def print_suite(console: Console, result: SuiteResult) -> None:
    table = Table(title=f"suite {result.suite} (per taskset; never merged)")
    for column in (
        "taskset",
        "tasks",
        "rollouts",
        "accuracy",
        "reward",
        "ok=false",
        "truncated",
        "out tok/s",
        "max_tokens",
    ):
        table.add_column(column, justify="left" if column == "taskset" else "right")
    for t in result.tasksets:
        table.add_row(
            t.name,
            str(t.tasks),
            str(t.rollouts),
            _fmt(t.accuracy),
            _fmt(t.reward_mean),
            str(t.failures),
            str(t.truncations),
            _fmt(t.output_tok_per_s, ".1f"),
            str(t.max_tokens),
        )
    console.print(table)


def print_fidelity(console: Console, rows: Sequence[tuple[str, FidelityMetrics]]) -> None:
    table = Table(title="fidelity against the reference (KL: top-k lower bound, nats/position)")
    for column in (
        "label",
        "positions",
        "kl_mean",
        "kl_p99",
        "kl_max",
        "top1",
        "top1 w/o ties",
        "greedy match",
        "full matches",
    ):
        table.add_column(column, justify="left" if column == "label" else "right")
    for label, m in rows:
        table.add_row(
            label,
            str(m.n_positions),
            _fmt(m.kl_mean, ".3g"),
            _fmt(m.kl_p99, ".3g"),
            _fmt(m.kl_max, ".3g"),
            _fmt(m.top1_agreement, ".4f"),
            _fmt(m.top1_gated_agreement, ".4f"),
            _fmt(m.greedy_match_fraction),
            f"{m.greedy_full_matches}/{m.n_probes}",
        )
    console.print(table)


def print_decision(console: Console, label: str, decision: GateDecision) -> None:
    verdict = "[green]pass[/green]" if decision.passed else f"[red]fail ({decision.failed_stage})[/red]"
    console.print(f"{label}: {verdict}")
    for reason in decision.reasons:
        console.print(f"  {reason}", markup=False)
    for v in decision.tasksets:
        if v.mode == "guard":  # the sign test on every paired task; what it can see, not a claim of no loss
            drop = "no drop" if v.detectable_drop is None else f"a {v.detectable_drop:.0%} drop"
            console.print(f"  {v.name}: guard, {v.decision} on {v.paired_tasks} paired tasks, lost {v.lost}, gained "
                          f"{v.gained}, sign-test p {v.mcnemar_p:.3g} (rejects at <= {v.alpha:.3g}; at --task-power it "
                          f"catches {drop})", markup=False)
            continue
        console.print(f"  {v.name}: {v.decision} after {v.tasks_used} of {v.paired_tasks} paired tasks, lost "
                      f"{v.lost}, gained {v.gained}; power {v.power:.0%} at alpha {v.alpha:.3g}", markup=False)
