"""A candidate whose task tier has not run is pending, not passed; the finalists' verdict is written back into
its trial, where TPE, the finalists' selection, a resumed study and optuna-dashboard read feasibility; and the
dashboard's own "Best Trial" (its API's best_trials) names only what the gate passed.

Real Optuna on real SQLite, the real TPE constraints, optuna-dashboard's own WSGI app over loopback HTTP."""

from __future__ import annotations

import json
import threading
import urllib.request
import warnings
from types import SimpleNamespace
from wsgiref.simple_server import WSGIRequestHandler, make_server

import optuna
import pytest
from optuna.samplers._tpe.sampler import _get_infeasible_trial_score

from autoresearch.checks.judging import PENDING, TierRunner
from autoresearch.checks.verdicts import record_task_verdict
from autoresearch.crown.finalists import select_finalists
from autoresearch.ground.outcome import TrialOutcome
from autoresearch.ground.speeds import speeds
from autoresearch.ground.study import (
    CONSTRAINTS,
    OK,
    GateSampler,
    constraints_of,
    feasible,
    tasks_pending,
    with_pending_speeds,
)
from autoresearch.measures.objectives import NOT_MEASURED
from autoresearch.measures.ranking import Ranking
from autoresearch.report.dashboard_plot import GRAPH_ID, save_gate_plot
from autoresearch.report.records import Point
from autoresearch.trial.record import TrialRecord
from autoresearch.trial.runner import TrialRunner
from eval.decision import GateDecision
from eval.gate import GateRecord

PASS = GateRecord(decision_id=1, decision=GateDecision(passed=True, failed_stage=None, reasons=(), fidelity=None,
                                                       tasksets=()))
FAIL = GateRecord(decision_id=2, decision=GateDecision(passed=False, failed_stage="fidelity",
                                                       reasons=("kl_mean 9.1e-04 > 5e-04",), fidelity=None,
                                                       tasksets=()))


def _study(tmp_path) -> optuna.Study:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # constraints_func: the dashboard still needs it
        return optuna.create_study(study_name="s", storage=f"sqlite:///{tmp_path / 'results.db'}",
                                   directions=["maximize", "maximize"],
                                   sampler=optuna.samplers.TPESampler(constraints_func=constraints_of))


def _runner(scope: str) -> SimpleNamespace:
    """The runner's state these stages read; the results-db writer is not what is tested."""
    runner = SimpleNamespace(tier=object(), plan=SimpleNamespace(task_tier_scope=scope),
                             _measure=lambda *a, **k: None)
    runner._gated = lambda *a, **k: TrialRunner._gated(runner, *a, **k)
    return runner


def _trial(study: optuna.Study, values: tuple[float, float], ending, role: str = "candidate") -> int:
    """One trial through the runner's real ending (`ending(record)`), told as study.optimize tells it."""
    trial = study.ask()
    trial.set_user_attr("role", role)
    trial.set_user_attr("decode_tok_per_s", values[0])  # as the runner stores them before fidelity
    trial.set_user_attr("prefill_tok_per_s", values[1])
    record = TrialRecord(trial)
    record.constraints.update(fits=OK, launch_ok=OK, measured=OK)
    told = ending(record)
    record.close()
    study.tell(trial, list(told))
    return trial.number


def passed(values):
    return lambda record: TrialRunner._gated(_runner("every"), record.trial, None, record, PASS, *values)


def rejected_at_fidelity(values):
    return lambda record: TrialRunner._gated(_runner("every"), record.trial, None, record, FAIL, *values)


def pending(values):
    """Through fidelity with --task-tier-scope finalists (the default): the runner's own _task_tier."""
    return lambda record: TrialRunner._task_tier(_runner("finalists"), record.trial, None, record, PASS, values,
                                                 server=None, stop_server=None, baseline=None, fidelity=None)


def test_a_candidate_whose_task_tier_has_not_run_is_pending_not_passed(tmp_path):
    """Before: it was stored PASSED with `tasks` satisfied although no task ran."""
    study = _study(tmp_path)
    number = _trial(study, (120.0, 1100.0), pending((120.0, 1100.0)))
    trial = study.trials[number]
    assert TrialOutcome.of(trial) is TrialOutcome.TASKS_PENDING and not TrialOutcome.of(trial).rejected
    assert "tasks" not in trial.constraints and trial.user_attrs["task_tier"] == PENDING
    assert tasks_pending(trial) and not feasible(trial)
    # Before: its speeds were its values, so optuna-dashboard named it "Best Trial" before any task ran
    assert trial.values == list(NOT_MEASURED) and speeds(trial) == (120.0, 1100.0)
    assert _get_infeasible_trial_score(trial) == 0  # nothing infeasible is invented
    assert with_pending_speeds(trial).values == [120.0, 1100.0]  # what TPE reads (GateSampler)
    assert trial.values == list(NOT_MEASURED)  # a copy: the stored trial is untouched


def test_tpe_searches_near_a_pending_trial_as_near_a_passed_one(tmp_path):
    """A pending trial is the night's likely champion. Plain TPE reads its NOT_MEASURED values as the slowest
    of all and samples away from it; GateSampler reads its measured speeds (fails with plain TPESampler)."""
    def near_the_fast_one(sampler_type) -> float:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            study = optuna.create_study(directions=["maximize", "maximize"], sampler=sampler_type(
                constraints_func=constraints_of, seed=7, n_startup_trials=1, multivariate=True))
        dist = {"x": optuna.distributions.FloatDistribution(0.0, 1.0)}
        for i in range(12):  # slow configurations spread over x < 0.5, each passed
            study.add_trial(optuna.trial.create_trial(
                params={"x": 0.04 * i}, distributions=dist, values=[50.0 + i, 500.0 + i],
                constraints={k: OK for k in CONSTRAINTS}, user_attrs={"decode_tok_per_s": 50.0 + i,
                                                                 "prefill_tok_per_s": 500.0 + i}))
        for x in (0.9, 0.92):  # the fast ones, pending, stored as the runner stores them
            study.add_trial(optuna.trial.create_trial(
                params={"x": x}, distributions=dist, values=list(NOT_MEASURED),
                constraints={k: OK for k in CONSTRAINTS if k != "tasks"},
                user_attrs={"decode_tok_per_s": 200.0, "prefill_tok_per_s": 2000.0, "task_tier": PENDING}))
        assert all(tasks_pending(t) for t in study.trials[-2:])
        samples = [study.ask(dist).params["x"] for _ in range(20)]
        return sum(x > 0.7 for x in samples) / len(samples)

    assert near_the_fast_one(GateSampler) > 0.5
    assert near_the_fast_one(optuna.samplers.TPESampler) < 0.3  # why GateSampler exists


def test_a_tier_verdict_is_written_back_where_sampler_finalists_and_a_resumed_study_read_it(tmp_path):
    """Before: only ar_finalists knew; the trial stayed feasible for TPE and a finalist every round."""
    study = _study(tmp_path)
    baseline = _trial(study, (100.0, 1000.0), passed((100.0, 1000.0)), role="baseline")
    lossy = _trial(study, (150.0, 1500.0), pending((150.0, 1500.0)))
    good = _trial(study, (160.0, 1100.0), pending((160.0, 1100.0)))  # both on the front

    def finalists(s: optuna.Study) -> list[int]:
        return [t.number for t in select_finalists(s, Ranking.of(s), s.trials[baseline], 5)]

    assert finalists(study) == [lossy, good]  # pending: the finalists' stage may judge them
    judged = {lossy: {"passed": False, "reasons": ["rg-math: lost 9, gained 0"]}, good: {"passed": True, "reasons": []}}
    tier = SimpleNamespace(_judge_pending=lambda s, t: judged[t.number])  # the task tier's answers: not tested here
    for number in (lossy, good):  # as the finalists' stage judges them (loop._task_judge)
        assert TierRunner.judge_pending(tier, study, study.trials[number]) == judged[number]
    resumed = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 'results.db'}")
    for s in (study, resumed):  # this process (its cache) and a resumed run
        judged_lossy, judged_good = s.trials[lossy], s.trials[good]
        assert finalists(s) == [good]  # rejected by its tier: never a finalist again
        assert not feasible(judged_lossy) and not tasks_pending(judged_lossy)
        assert _get_infeasible_trial_score(judged_lossy) > 0  # TPE learns it as infeasible
        assert judged_lossy.system_attrs["constraints"][CONSTRAINTS.index("tasks")] > 0  # the dashboard greys it
        assert TrialOutcome.of(judged_lossy) is TrialOutcome.GATE_FAILED_TASKS
        assert "rg-math: lost 9, gained 0" in judged_lossy.user_attrs["reasons"]
        assert judged_lossy.values == list(NOT_MEASURED)
        assert feasible(judged_good) and TrialOutcome.of(judged_good) is TrialOutcome.PASSED
        assert judged_good.values == [160.0, 1100.0]


@pytest.fixture
def dashboard():
    """optuna-dashboard's own WSGI app (the one `optuna-dashboard <storage>` serves), on a loopback port."""
    servers = []

    def serve(storage_url: str) -> str:
        from optuna_dashboard import wsgi

        class Quiet(WSGIRequestHandler):
            def log_message(self, *args):
                pass

        server = make_server("127.0.0.1", 0, wsgi(storage_url), handler_class=Quiet)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}"

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


def test_optuna_dashboard_names_as_best_only_what_the_gate_passed(tmp_path, dashboard):
    """Before: a configuration the fidelity gate rejected (fastest of all) was the dashboard's "Best Trial", as
    the embedded default's trial 5 was; Optuna's own best_trials left it out."""
    study = _study(tmp_path)
    _trial(study, (100.0, 1000.0), passed((100.0, 1000.0)), role="baseline")
    lossy = _trial(study, (200.0, 2000.0), rejected_at_fidelity((200.0, 2000.0)))
    tier_lossy = _trial(study, (150.0, 1500.0), pending((150.0, 1500.0)))
    good = _trial(study, (120.0, 1100.0), passed((120.0, 1100.0)))
    record_task_verdict(study, tier_lossy, passed=False, reasons=["rg-math: lost 9, gained 0"])

    url = dashboard(f"sqlite:///{tmp_path / 'results.db'}")
    with urllib.request.urlopen(f"{url}/api/studies/{study._study_id}", timeout=30) as response:
        detail = json.load(response)
    assert [t["number"] for t in detail["best_trials"]] == [good]
    assert [t.number for t in study.best_trials] == [good]  # Optuna's own agrees
    drawn = {t["number"]: t for t in detail["trials"]}
    for number in (lossy, tier_lossy):  # their violations still drawn, their speeds in their user attrs
        assert max(drawn[number]["constraints"]) > 0
        assert "decode_tok_per_s" in {a["key"] for a in drawn[number]["user_attrs"]}


def test_optuna_dashboard_names_no_pending_trial_best_and_draws_the_rejected_greyed(tmp_path, dashboard):
    """Before: a pending trial (no task run) faster than everything judged was the dashboard's "Best Trial".
    The gate's plot, in the dashboard's own user-plot store, draws every measured trial, the rejected greyed."""
    study = _study(tmp_path)
    base = _trial(study, (100.0, 1000.0), passed((100.0, 1000.0)), role="baseline")
    lossy = _trial(study, (200.0, 2000.0), rejected_at_fidelity((200.0, 2000.0)))
    waiting = _trial(study, (180.0, 1800.0), pending((180.0, 1800.0)))
    good = _trial(study, (120.0, 1100.0), passed((120.0, 1100.0)))
    points = [Point(t.number, *speeds(t), feasible(t), t.number in {waiting, good}, tasks_pending(t))
              for t in study.trials]
    snapshot = SimpleNamespace(points=points, baseline=SimpleNamespace(trial=base, decode=100.0, prefill=1000.0))
    save_gate_plot(study, snapshot)

    url = dashboard(f"sqlite:///{tmp_path / 'results.db'}")
    with urllib.request.urlopen(f"{url}/api/studies/{study._study_id}", timeout=30) as response:
        detail = json.load(response)
    assert [t["number"] for t in detail["best_trials"]] == [good]
    (figure,) = [json.loads(g["graph_object"]) for g in detail["plotly_graph_objects"] if g["id"] == GRAPH_ID]
    traces = {trace["name"]: trace for trace in figure["data"]}
    assert traces["rejected by the gate"]["text"] == [f"trial {lossy}"]
    assert traces["rejected by the gate"]["marker"]["color"] == "#cccccc"  # greyed, as the dashboard greys
    assert (traces["rejected by the gate"]["x"], traces["rejected by the gate"]["y"]) == ([2000.0], [200.0])
    assert traces["task tier pending"]["text"] == [f"trial {waiting}"]
    assert traces["passed the gate"]["text"] == [f"trial {base}", f"trial {good}"]

    save_gate_plot(study, SimpleNamespace(points=points[:1], baseline=None))  # shorter: no stale chunk left
    with urllib.request.urlopen(f"{url}/api/studies/{study._study_id}", timeout=30) as response:
        (again,) = [json.loads(g["graph_object"]) for g in json.load(response)["plotly_graph_objects"]]
    assert [t["name"] for t in again["data"]] == ["passed the gate"]


def test_a_pending_trial_prunes_what_it_clearly_dominates_and_a_rejected_one_does_not():
    """A pending trial passed every gate that has run: it is a dominance reference, as a passed one was before
    pending existed (with feasible() alone the default scope pruned nothing). A rejected one never is."""
    from autoresearch.ground.study import CONSTRAINTS
    from autoresearch.measures.objectives import dominated_by

    study = optuna.create_study(directions=["maximize", "maximize"])
    through_fidelity = {k: -1.0 for k in CONSTRAINTS if k != "tasks"}
    for constraints in (through_fidelity | {"fidelity": 1.0}, through_fidelity):  # rejected, then pending
        study.add_trial(optuna.trial.create_trial(  # as the runner stores both: speeds in user attrs only
            values=list(NOT_MEASURED), constraints=constraints,
            user_attrs={"decode_tok_per_s": 200.0, "prefill_tok_per_s": 2000.0}))
    assert dominated_by(study, (100.0, 1000.0), margin_rel=0.05) == 1
    assert dominated_by(study, (195.0, 1000.0), margin_rel=0.05) is None
