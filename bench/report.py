"""Views of bench records: a rich table for people, `key: value` lines for grep, JSON for machines.

Nothing here computes a number of its own; every value shown comes from the records.

Usage:
    render(result, Console())
    print("\\n".join(summary_lines(result)))
    write_json(result.to_dict(), Path("bench.json"))
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.records import BenchResult, DecodePoint, PrefillPoint
from bench.reference import ReferenceCheck
from bench.stats import Comparison, NoiseFloor, Summary

__all__ = [
    "DRIFT_WARNING",
    "power_line",
    "render",
    "render_comparisons",
    "render_noise_floor",
    "render_reference",
    "summary_lines",
    "write_json",
]


DRIFT_WARNING = 0.05  # first-half vs second-half median change worth a person's attention


def _rate(s: Summary | None) -> str:
    if s is None:
        return "-"
    return f"{s.median:,.1f} [{s.ci_low:,.1f}, {s.ci_high:,.1f}]"


def _runs(point: PrefillPoint | DecodePoint) -> str:
    text = f"{len(point.valid_runs)}/{len(point.runs)}"
    return text if point.settled else text + " cap"


def _per_joule(s: Summary | None) -> str:
    return "-" if s is None else f"{s.median:,.3f}"


def power_line(power: dict | None) -> str:
    """How energy was measured and the power limit the GPU ran under, in one line (the user's limit: bench never sets it)."""
    if power is None:
        return "Energy: unmeasured (no GPU telemetry)"
    methods = ", ".join(f"{n} runs by {m}" for m, n in sorted(power["energy_methods"].items()))
    share = power["power_capped_share"]
    limit = power["power_limit_w"]
    text = (f"Energy: {methods}; enforced power limit {'-' if limit is None else f'{limit:.0f} W'} (the user's, as "
            f"set: bench never changes it); power-capped (sw_power_cap) {'-' if share is None else f'{share:.0%}'} "
            "of the measured time")
    reasons = [*power["energy_unmeasured"], *power["energy_notes"]]
    return text + (f"; {'; '.join(reasons)}" if reasons else "")


def _gpu_cell(point: PrefillPoint | DecodePoint) -> str:
    windows = [r.gpu for r in point.runs if r.gpu is not None]
    if not windows:
        return "-"
    sm = f"{min(w.sm_clock_mhz_min for w in windows)}-{max(w.sm_clock_mhz_max for w in windows)} MHz"
    temp = f"{max(w.temperature_c_max for w in windows)} C"
    throttled = sum(w.is_throttled for w in windows)
    return f"{sm}, {temp}" + (f", [red]{throttled} throttled[/red]" if throttled else "")


def render(result: BenchResult, console: Console) -> None:
    """Print the server, the GPU, and one table per ladder."""
    s = result.server
    console.print(
        f"[bold]{s.model}[/bold] at {s.url} ({s.api}); ignore_eos {'yes' if s.accepts_ignore_eos else 'no'}, "
        f"server timings {'yes' if s.reports_timings else 'no'}, cached_tokens "
        f"{'reported' if s.reports_cached_tokens else 'not reported'}"
    )
    if result.gpu is not None:
        g = result.gpu
        console.print(f"GPU {g.index}: {g.name}, driver {g.driver_version}, power limit {g.power_limit_w} W")
    else:
        console.print("GPU: no NVML telemetry on this machine")
    console.print(power_line(result.power()), markup=False)
    if result.prefill:
        table = Table(title="Prefill (cold TTFT, unique prompts)")
        for col in (
            "target",
            "prompt tok",
            "runs",
            "TTFT s",
            "tok/s client",
            "tok/s server",
            "cache hits",
            "tok/J",
            "GPU",
        ):
            table.add_column(col, justify="right")
        for p in result.prefill:
            ttft = f"{p.ttft_s.median:.3f}" if p.ttft_s else "-"
            tokens = f"{p.prompt_tokens_median:,.0f}" if p.prompt_tokens_median else "-"
            table.add_row(
                f"{p.target_tokens:,}",
                tokens,
                _runs(p),
                ttft,
                _rate(p.prefill_tok_per_s_client),
                _rate(p.prefill_tok_per_s_server),
                str(p.cache_hits),
                _per_joule(p.prefill_tok_per_j),
                _gpu_cell(p),
            )
        console.print(table)
    if result.decode:
        until_eos = result.plan.get("decode_until") == "eos"
        table = Table(title=f"Decode (batch 1, greedy, {'to the answer' if until_eos else 'fixed length'})")
        for col in (
            "context",
            "kind",
            "prompt tok",
            "answer tok",
            "runs",
            "tok/s client",
            "tok/s server",
            "accepted/drafted",
            "tok/J",
            "GPU",
        ):
            table.add_column(col, justify="right")
        for d in result.decode:
            tokens = f"{d.prompt_tokens_median:,.0f}" if d.prompt_tokens_median else "-"
            accept = "-"
            if d.spec_drafted_tokens is not None:  # the server drafts: show the counts behind the rate
                rate = f"{d.spec_acceptance:.1%} " if d.spec_acceptance is not None else ""
                accept = f"{rate}({d.spec_accepted_tokens:,}/{d.spec_drafted_tokens:,})"
            answer = f"{d.answer_tokens_median:,.0f}" if d.answer_tokens_median is not None else "-"
            table.add_row(
                f"{d.context_tokens:,}",
                d.kind,
                tokens,
                answer,
                _runs(d),
                _rate(d.decode_tok_per_s_client),
                _rate(d.decode_tok_per_s_server),
                accept,
                _per_joule(d.decode_tok_per_j),
                _gpu_cell(d),
            )
        console.print(table)
    console.print(
        "Medians with order-statistic intervals (coverage in the JSON); 'cap': spread target not reached."
    )
    if short := [f"{d.metric('decode_tok_per_s_client').point} (answers of {d.answer_tokens_median:,.0f} tokens)"
                 for d in result.decode if d.runs_pass_the_answer]:
        console.print(
            f"[yellow]decode timed mostly past the model's answers[/yellow] at {', '.join(short)}: its answers end "
            f"(median) before the {result.plan['decode_tokens']} tokens each run decodes, and the text past an "
            "answer flatters drafting; --decode-until eos times the answers alone"
        )
    for point in (*result.prefill, *result.decode):
        for reason in sorted(set(point.invalid_reasons)):
            console.print(f"[yellow]{point.key} invalid run:[/yellow] {reason}")
        if point.drift_rel is not None and abs(point.drift_rel) > DRIFT_WARNING:
            console.print(
                f"[yellow]{point.key} drifted {point.drift_rel:+.1%}[/yellow] from its first to its second half of "
                "runs: the server or GPU changed state (throttling, another job); repeat the measurement"
            )


def summary_lines(result: BenchResult) -> list[str]:
    """Greppable `metric: median` lines, one per metric, pooled draft acceptance, the model's answer
    lengths, tokens per joule, the power-capped share, and the invalid-run count."""
    lines = [f"{key}: {value:.2f}" for key, value in result.headline().items()]
    lines += [f"{key}: {value:.4f}" for key, value in result.acceptance().items()]
    lines += [f"{key}: {value:.0f}" for key, value in result.answers().items()]
    lines += [f"{key}: {value:.4f}" for key, value in result.energy_headline().items()]
    if (power := result.power()) is not None and power["power_capped_share"] is not None:
        lines.append(f"power_capped_share: {power['power_capped_share']:.4f}")
    lines.append(f"invalid_runs: {result.invalid_runs}")
    return lines


def render_comparisons(comparisons: Iterable[Comparison], console: Console) -> None:
    table = Table(title="Candidate vs baseline (rates: higher is better)")
    for col in ("metric", "baseline", "candidate", "ratio [interval]", "margin", "verdict"):
        table.add_column(col, justify="right")
    colours = {"faster": "green", "slower": "red", "same": "white"}
    for c in comparisons:
        table.add_row(
            c.metric,
            _rate(c.baseline),
            _rate(c.candidate),
            f"{c.ratio:.3f} [{c.ratio_ci_low:.3f}, {c.ratio_ci_high:.3f}]",
            f"{c.margin_rel:.1%}",
            f"[{colours[c.verdict]}]{c.verdict}[/{colours[c.verdict]}]",
        )
    console.print(table)


def render_noise_floor(floor: NoiseFloor, console: Console) -> None:
    table = Table(title="Noise floor: same configuration, two launches")
    table.add_column("metric")
    table.add_column("|ratio - 1|", justify="right")
    for metric, value in floor.rel_diff:
        table.add_row(metric, f"{value:.2%}")
    console.print(table)


def render_reference(check: ReferenceCheck, console: Console) -> None:
    lo, hi = check.factor_bounds
    table = Table(title=f"Against {check.source}")
    for name in ("row", "metric", "published", "measured", "vs published x factor", "tolerance", ""):
        table.add_column(name, justify="left" if name in ("row", "metric") else "right")
    for r in check.rows:
        published = (
            f"{r.published[0]:,.1f}"
            if r.published[0] == r.published[1]
            else (f"{r.published[0]:,.1f}-{r.published[1]:,.1f}")
        )
        table.add_row(
            r.row,
            r.metric,
            published,
            f"{r.measured:,.1f}",
            f"{r.deviation:+.1%}",
            f"±{r.tolerance:.1%}",
            "ok" if r.ok else "[red]OFF[/red]",
        )
    console.print(table)
    for family, f in check.factors.items():
        mark = "ok" if lo <= f <= hi else f"[red]outside {lo:.2f}-{hi:.2f}[/red]"
        console.print(f"machine factor {family}: {f:.3f} ({mark})")
    for what, items in (("not measured", check.missing), ("rows without a result", check.unmeasured)):
        if items:
            console.print(f"[red]{what}[/red]: {', '.join(items)}")
    console.print("reproduced" if check.ok else "[red]not reproduced[/red]")


def write_json(data: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n", encoding="utf-8")
