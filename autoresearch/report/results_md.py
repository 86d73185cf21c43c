"""RESULTS.md and its Pareto plot: a view of what results.db holds, written at the end of each of the run's
stages (the search, the finalists, the minimization, the night) and when the search is stopped; `python -m
autoresearch report` writes it again from a stored study.

`write_report` reads the store once (autoresearch.report.snapshot.read_snapshot: a few queries, however many
trials the study holds), draws the plot and renders autoresearch/report/RESULTS.md.jinja from the snapshot.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import jinja2
import optuna

from autoresearch.ground.db import ResultsDB
from autoresearch.ground.outputs import plot_path
from autoresearch.ground.plan import RunPlan
from autoresearch.ground.study import load_stored_study
from autoresearch.report.dashboard_plot import save_gate_plot
from autoresearch.report.records import StudySnapshot, changed_knobs, with_plot
from autoresearch.report.snapshot import read_snapshot
from eval import EvalStore

__all__ = ["changed_knobs", "regenerate_report", "render", "render_section", "write_report"]


def _num(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _times(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}x"


@functools.cache
def _template() -> jinja2.Template:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(Path(__file__).parent), trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True, undefined=jinja2.StrictUndefined, autoescape=False)
    env.filters.update(num=_num, times=_times, f=format)
    return env.get_template("RESULTS.md.jinja")


def render(snapshot: StudySnapshot) -> str:
    """RESULTS.md's text for one snapshot."""
    return _template().render(s=snapshot)


def render_section(name: str, value) -> str:
    """One section macro of the template (e.g. "measured_table", "finalists_table", "task_tier") applied to
    its part of a snapshot: the section's lines, each ending in a newline."""
    return str(getattr(_template().module, name)(value))


def _plot(snapshot: StudySnapshot, path: Path) -> bool:
    try:
        import matplotlib
    except ImportError:  # the report stays complete without its picture
        return False

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = snapshot.points
    if not done:
        return False
    fig, ax = plt.subplots(figsize=(7, 5), dpi=100)
    rejected = [p for p in done if not p.feasible and not p.tasks_pending]
    if rejected:
        ax.scatter([p.prefill for p in rejected], [p.decode for p in rejected], marker="x", color="tab:red",
                   label="rejected by the gate")
    feasible = [p for p in done if p.feasible and not p.on_front]
    ax.scatter([p.prefill for p in feasible], [p.decode for p in feasible], color="tab:gray", label="feasible")
    pending = [p for p in done if p.tasks_pending]
    if pending:
        ax.scatter([p.prefill for p in pending], [p.decode for p in pending], facecolors="none",
                   edgecolors="tab:blue", s=60, zorder=4, label="task tier pending")
    on_front = sorted((p for p in done if p.on_front), key=lambda p: p.prefill)
    ax.plot([p.prefill for p in on_front], [p.decode for p in on_front], "-", color="tab:blue")
    judged = [p for p in on_front if p.feasible]
    ax.plot([p.prefill for p in judged], [p.decode for p in judged], "o", color="tab:blue",
            label="gated Pareto front")
    if snapshot.baseline is not None:
        ax.scatter([snapshot.baseline.prefill], [snapshot.baseline.decode], marker="*", s=200, color="gold",
                   edgecolor="black", zorder=5, label="baseline")
    for p in done:
        ax.annotate(str(p.trial), (p.prefill, p.decode), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("prefill tok/s (server-timed)")
    ax.set_ylabel("decode tok/s (client-timed)")
    ax.set_title(snapshot.plan.study_name, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def write_report(plan: RunPlan, study: optuna.Study, db: ResultsDB, store: EvalStore, *,
                 dashboard: bool = False) -> Path:
    """RESULTS.md and its plot; `dashboard`: the same plot into the study too, for optuna-dashboard (the loop's
    own study only: `report` of a stored database writes nothing into it)."""
    snapshot = read_snapshot(plan, study, db, store)
    if dashboard:
        save_gate_plot(study, snapshot)
    plot = plot_path(plan.results_md)
    plan.results_md.parent.mkdir(parents=True, exist_ok=True)  # before the plot, which goes beside it
    if _plot(snapshot, plot):
        snapshot = with_plot(snapshot, plot.name)
    tmp = plan.results_md.with_suffix(".tmp")
    tmp.write_text(render(snapshot))
    tmp.replace(plan.results_md)  # atomic: a killed loop never leaves half a report
    return plan.results_md


def regenerate_report(plan: RunPlan) -> int:
    """`python -m autoresearch report`: RESULTS.md of a stored study, written again."""
    study = load_stored_study(plan)
    path = write_report(plan, study, ResultsDB(plan.storage_url), EvalStore(plan.storage_url))
    print(f"wrote {path}", file=sys.stderr)
    return 0
