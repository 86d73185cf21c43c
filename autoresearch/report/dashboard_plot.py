"""The gate's Pareto plot inside optuna-dashboard: every measured trial, the rejected ones greyed.

optuna-dashboard 0.21 names as "Best Trial" the Pareto front of the COMPLETE trials' values, constraints ignored,
so a rejected or pending trial stores NOT_MEASURED as values (autoresearch.ground.speeds) and its own Pareto
plot cannot draw it. This plot can: the same points RESULTS.md's plot draws (the snapshot's), as a plotly
figure stored the way the dashboard's `save_plotly_graph_object` stores one (study system attrs
"dashboard:plot_data:<id>:<chunk>", read by its `get_plotly_graph_objects`), written as JSON so that neither
plotly nor the dashboard has to be installed beside the loop. tests/autoresearch/test_pending.py reads it back
through the dashboard's own API.

Only the loop writes it, into its own study: `report` on a stored database (a committed example) writes nothing
into it.
"""

from __future__ import annotations

import json

import optuna

from autoresearch.report.records import StudySnapshot

__all__ = ["GRAPH_ID", "save_gate_plot"]

GRAPH_ID = "gate-pareto-front"  # an HTML id: the dashboard refuses others
_PREFIX = f"dashboard:plot_data:{GRAPH_ID}:"
_CHUNK = 2045  # the dashboard's SYSTEM_ATTR_MAX_LENGTH: Optuna's storages cap an attr's length near it


def gate_figure(snapshot: StudySnapshot) -> dict:
    """The plotly figure (as JSON data): passed, pending, rejected (greyed) and the baseline, prefill against decode."""
    points = snapshot.points
    groups = (
        ("passed the gate", [p for p in points if p.feasible], {"color": "#1f77b4", "size": 9}),
        ("task tier pending", [p for p in points if p.tasks_pending],
         {"color": "rgba(0,0,0,0)", "size": 10, "line": {"color": "#1f77b4", "width": 2}}),
        ("rejected by the gate", [p for p in points if not p.feasible and not p.tasks_pending],
         {"color": "#cccccc", "size": 8, "symbol": "x"}),
    )
    data = [{"type": "scatter", "mode": "markers", "name": name, "marker": marker,
             "x": [p.prefill for p in group], "y": [p.decode for p in group],
             "text": [f"trial {p.trial}" for p in group]} for name, group, marker in groups if group]
    front = sorted((p for p in points if p.on_front), key=lambda p: p.prefill)
    if front:
        data.append({"type": "scatter", "mode": "lines", "name": "Pareto front (passed or pending)",
                     "line": {"color": "#1f77b4"}, "x": [p.prefill for p in front], "y": [p.decode for p in front],
                     "hoverinfo": "skip"})
    base = snapshot.baseline
    if base is not None and base.decode and base.prefill:
        data.append({"type": "scatter", "mode": "markers", "name": "baseline", "x": [base.prefill],
                     "y": [base.decode], "text": [f"trial {base.trial}"],
                     "marker": {"symbol": "star", "size": 16, "color": "gold", "line": {"color": "black", "width": 1}}})
    layout = {"title": {"text": "Pareto front as the gate sees it (greyed: rejected)"},
              "xaxis": {"title": {"text": "prefill tok/s (server-timed)"}},
              "yaxis": {"title": {"text": "decode tok/s (client-timed)"}}}
    return {"data": data, "layout": layout}


def save_gate_plot(study: optuna.Study, snapshot: StudySnapshot) -> None:
    """Store gate_figure in the study where optuna-dashboard shows user plots (overwriting the last one)."""
    text = json.dumps(gate_figure(snapshot), allow_nan=False)
    chunks = [text[i:i + _CHUNK] for i in range(0, len(text), _CHUNK)]
    storage, study_id = study._storage, study._study_id  # as the dashboard's own save_plotly_graph_object
    for i, chunk in enumerate(chunks):
        storage.set_study_system_attr(study_id, f"{_PREFIX}{i}", chunk)
    stale = [k for k in storage.get_study_system_attrs(study_id) if k.startswith(_PREFIX)]
    for i in range(len(chunks), len(stale)):  # a shorter figure than the last: the dashboard joins every chunk
        storage.set_study_system_attr(study_id, f"{_PREFIX}{i}", "")
