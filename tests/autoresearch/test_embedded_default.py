"""The newcomer's command, end to end: assertions on results.db rows and RESULTS.md, not exit codes."""

from __future__ import annotations

import json

import optuna
import pytest
import sqlalchemy as sa

from autoresearch.ground.study import CONSTRAINTS, constraints_of
from serving.config import ServingConfig

from .conftest import run_loop

pytestmark = pytest.mark.slow


def _study(run):
    names = optuna.get_all_study_names(run.db_url)
    assert len(names) == 1
    return optuna.load_study(study_name=names[0], storage=run.db_url)


def test_baseline_is_trial_zero_and_carries_its_evidence(embedded_study):
    study = _study(embedded_study)
    trials = study.get_trials()
    baseline = trials[0]
    assert baseline.user_attrs["role"] == "baseline" and baseline.state == optuna.trial.TrialState.COMPLETE
    assert [baseline.constraints[k] for k in CONSTRAINTS] == [-1.0] * len(CONSTRAINTS)  # Optuna's, by name
    assert "constraints" not in baseline.user_attrs  # one record of them
    assert baseline.values[0] > 0 and baseline.values[1] > 0
    assert baseline.user_attrs["config"] == ServingConfig.from_dict({"engine": "transformers"}).to_dict()
    evidence = study.user_attrs["baseline_evidence"]
    assert evidence["trial"] == 0 and evidence["suite_run_id"] and evidence["floor_measurement_id"]
    assert study.metric_names == ["decode_tok_per_s", "prefill_tok_per_s"]


def test_every_trial_is_counted_and_explained(embedded_study):
    study = _study(embedded_study)
    counted = [t for t in study.get_trials() if t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)]
    assert len(counted) == 3
    for t in counted:
        assert t.user_attrs["outcome"] and "config_digest" in t.user_attrs
        if t.user_attrs["outcome"] in ("baseline", "passed"):
            assert set(CONSTRAINTS) <= set(t.constraints)
        elif t.user_attrs["outcome"] == "tasks_pending":  # through fidelity; no task ran: no `tasks` constraint
            assert set(CONSTRAINTS) - set(t.constraints) == {"tasks"} and max(t.constraints.values()) <= 0
        elif t.user_attrs["outcome"] not in ("duplicate", "dominated"):  # stopped by no violation of its own
            assert any(t.constraints.get(k, 0.0) > 0 for k in CONSTRAINTS), t.user_attrs  # what stopped it
        # what optuna-dashboard 0.21 draws (its _serializer.py: trial_system_attrs["constraints"])
        assert t.system_attrs["constraints"] == constraints_of(t)
        if t.user_attrs["outcome"] not in ("baseline", "passed"):
            assert t.user_attrs["reasons"], t.user_attrs


def test_measurement_provenance_and_eval_rows(embedded_study):
    engine = sa.create_engine(embedded_study.db_url)
    with engine.connect() as conn:
        kinds = {row[0] for row in conn.execute(sa.text("select distinct kind from ar_measurements"))}
        prov = conn.execute(sa.text("select engine, torch_version, model_manifest_hash from ar_provenance")).all()
        tables = set(sa.inspect(conn).get_table_names())
        bench = conn.execute(sa.text("select payload from ar_measurements where kind='bench' and trial=0 and launch=0"))
        payload = bench.scalar_one()
    assert {"bench", "fidelity", "suite"} <= kinds
    assert prov and all(p.engine == "transformers" and p.torch_version and len(p.model_manifest_hash) == 64 for p in prov)
    assert {"trials", "alembic_version", "ar_measurements", "ar_provenance", "ar_finalists"} <= tables
    assert any(t.startswith("eval_") for t in tables)
    payload = json.loads(payload) if isinstance(payload, str) else payload
    assert payload["prefill"] and payload["decode"] and payload["headline"]


def test_results_md_reports_the_stored_numbers(embedded_study):
    study = _study(embedded_study)
    text = (embedded_study.cwd / "RESULTS.md").read_text()
    baseline = study.get_trials()[0]
    for heading in ("## Champion", "## Gated Pareto front", "## Baseline", "## Rejected and stopped candidates",
                    "## Per-taskset results", "## Provenance"):
        assert heading in text
    assert f"decode {baseline.values[0]:,.2f} tok/s" in text
    assert "rg-math" in text and "rg-logic" in text
    assert "The task tier ran as a smoke check" in text  # a random model's answers judge nothing
    assert (embedded_study.cwd / "RESULTS-pareto.png").stat().st_size > 1000
    assert study.user_attrs["champion"]["reason"] in text


def test_optuna_dashboard_names_as_best_only_what_the_gate_passed_and_draws_every_measured_trial(embedded_study):
    """What the README tells a new user to open: the dashboard's own API over the newcomer's results.db. Its
    "Best Trial" is the front of every COMPLETE trial's values, so only trials the gate passed whole may carry
    values; the loop's gate plot (a study user plot) draws every measured trial, the rejected greyed."""
    import threading
    import urllib.request
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    from optuna_dashboard import wsgi

    from autoresearch.ground.speeds import speeds
    from autoresearch.ground.study import feasible
    from autoresearch.report.dashboard_plot import GRAPH_ID

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args):
            pass

    study = _study(embedded_study)
    server = make_server("127.0.0.1", 0, wsgi(embedded_study.db_url), handler_class=Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/api/studies/{study._study_id}"
        with urllib.request.urlopen(url, timeout=60) as response:
            detail = json.load(response)
    finally:
        server.shutdown()
        server.server_close()
    trials = {t.number: t for t in study.get_trials()}
    best = [t["number"] for t in detail["best_trials"]]
    assert best and all(feasible(trials[n]) for n in best), best
    (figure,) = [json.loads(g["graph_object"]) for g in detail["plotly_graph_objects"] if g["id"] == GRAPH_ID]
    drawn = {text for trace in figure["data"] for text in trace.get("text", [])}
    measured = {f"trial {t.number}" for t in trials.values()
                if t.state == optuna.trial.TrialState.COMPLETE and speeds(t) is not None}
    assert measured <= drawn


def test_export_writes_a_servable_config(embedded_study):
    result = run_loop(embedded_study.cwd, embedded_study.env, "export", "--out", "champion.json")
    assert result.returncode == 0, result.stderr
    config = ServingConfig.from_json((embedded_study.cwd / "champion.json").read_text())
    assert config.engine == "transformers"
    assert "python -m serving --model" in result.stdout


def test_a_finished_study_resumes_without_rerunning(embedded_study):
    before = len(_study(embedded_study).get_trials())
    result = run_loop(embedded_study.cwd, embedded_study.env, "--trials", "3", "--suite-limit", "1",
                      "--suite-max-tokens", "16", "--finalist-launches", "2", "--port", "0", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(_study(embedded_study).get_trials()) == before


def test_bad_arguments_are_usage_errors(embedded_study):
    before = len(_study(embedded_study).get_trials())
    result = run_loop(embedded_study.cwd, embedded_study.env, "--suite", "broad", "--trials", "7", timeout=120)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines[0] == "error: suite broad cannot run here; nothing was launched:"
    assert "taskset aime25 is not installed; fix: `python -m eval setup` (needs GitHub)" in lines
    assert any(line.startswith("dataset livecodebench is not in ") for line in lines)
    assert len(_study(embedded_study).get_trials()) == before  # preflight runs before the baseline launches
    result = run_loop(embedded_study.cwd, embedded_study.env, "--model", "/no/such/folder", "--trials", "1",
                      timeout=120)
    assert result.returncode == 2 and "not a folder" in result.stderr  # a usage mistake (ed7940c)


def test_a_stored_study_reports_and_exports_on_a_machine_without_its_model(embedded_study, tmp_path):
    import shutil

    shutil.copy(embedded_study.cwd / "results.db", tmp_path / "copied.db")
    name = _study(embedded_study).study_name
    env = {**embedded_study.env, "AUTORESEARCH_CACHE": str(tmp_path / "empty-cache")}  # no model here
    storage = f"sqlite:///{tmp_path / 'copied.db'}"
    result = run_loop(tmp_path, env, "report", "--study", name, "--storage", storage, "--results-md", "R.md",
                      timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    text = (tmp_path / "R.md").read_text()
    assert f"# Results: {name}" in text and "Fidelity gate: each statistic within 3 x" in text
    assert not (tmp_path / "empty-cache").exists()  # nothing was generated or hashed
    result = run_loop(tmp_path, env, "export", "--study", name, "--storage", storage, "--out", "c.json", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert ServingConfig.from_json((tmp_path / "c.json").read_text()).engine == "transformers"


def test_one_gate_decision_per_candidate_and_no_champion_without_its_task_tier(embedded_study):
    study = _study(embedded_study)
    engine = sa.create_engine(embedded_study.db_url)
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT id, candidate_label, candidate_suite_run_id FROM eval_decisions")).all()
    labels = [r[1] for r in rows]
    gated = {t.number: t for t in study.get_trials() if t.user_attrs.get("gate_decision_id")}
    if not gated and not rows:  # speed is noisy on 2 loaded cores: every candidate can be stopped before its gate
        pytest.skip("no candidate of this run reached the fidelity gate: no decision to count")
    assert len(labels) == len(set(labels)), labels  # before: a passing row after fidelity, then another
    assert sorted(t.user_attrs["gate_decision_id"] for t in gated.values()) == sorted(r[0] for r in rows)
    champion = study.user_attrs["champion"]
    if not champion["is_baseline"]:  # crowned only after its task tier (here: its smoke run) completed
        row = next(r for r in rows if r[0] == gated[champion["trial"]].user_attrs["gate_decision_id"])
        assert row[2] is not None


def test_the_night_plan_is_printed_and_kept(embedded_study):
    out = embedded_study.result.stdout
    assert "night plan before the first trial:" in out
    assert "night plan once the baseline measured its rates:" in out
    kept = _study(embedded_study).user_attrs["night_plan"]
    assert kept["when"] == "night plan once the baseline measured its rates" and "measured by this study" in kept["text"]
    assert "## Night plan (night plan once the baseline measured its rates)" in \
        (embedded_study.cwd / "RESULTS.md").read_text()


def test_plan_command_reads_the_rates_a_stored_study_measured(embedded_study):
    study = _study(embedded_study)
    result = run_loop(embedded_study.cwd, embedded_study.env, "plan", "--study", study.study_name, "--hours", "1")
    assert result.returncode in (0, 1), result.stderr
    assert "rates measured by this study" in result.stdout and "trials through launch, bench and fidelity" in \
        result.stdout
