"""RESULTS.md's table of every measured configuration: speeds, fidelity, and the GPU each ran on."""

from __future__ import annotations

import math
from types import SimpleNamespace

import optuna
import pytest

from autoresearch.ground.db import ResultsDB
from autoresearch.report.ratios import Ratios
from autoresearch.report.records import FinalistLaunches
from autoresearch.report.results_md import render_section
from autoresearch.report.snapshot import read_finalists, read_measured, read_task_tier


def _gpu(uuid: str) -> dict:
    return {"gpu": {"name": "NVIDIA H200", "details": {"name": "NVIDIA H200", "uuid": uuid}}}


def _study_with_trials(tmp_path, uuids):
    url = f"sqlite:///{tmp_path / 'results.db'}"
    db = ResultsDB(url)
    study = optuna.create_study(study_name="s", storage=url, directions=["maximize", "maximize"])
    for i, uuid in enumerate(uuids):
        trial = study.ask()
        trial.set_user_attr("role", "baseline" if i == 0 else "candidate")
        trial.set_user_attr("config", {"args": {"max_chunk_size": 2048 * (i + 1)}, "env": {}})
        trial.set_user_attr("outcome", "passed")
        study.tell(trial, [60.0 + i, 6000.0 + 100 * i])
        headline = {"decode_tok_per_s_client@1024/math": 60.0 + i, "prefill_tok_per_s_client@8192": 6000.0 + 100 * i,
                    "prefill_tok_per_s_server@8192": 6100.0 + 100 * i}
        db.add_measurement(study="s", trial=i, kind="bench", config_digest=f"c{i}", payload={"headline": headline})
        db.add_measurement(study="s", trial=i, kind="fidelity", config_digest=f"c{i}", payload={"metrics": {
            "kl_mean": 1e-5 * i, "top1_agreement": 1.0 - 0.01 * i, "top1_decisive_agreement": 1.0 - 0.001 * i}})
        db.add_provenance(study="s", trial=i, config_digest=f"c{i}", model_manifest_hash="0" * 64,
                          engine="exllamav3", details=_gpu(uuid))
    base = study.trials[0].user_attrs["config"]
    return render_section("measured_table", read_measured(study, db, "s", base)).splitlines()


def test_every_measured_configuration_is_listed_with_its_fidelity_and_gpu(tmp_path):
    lines = _study_with_trials(tmp_path, ["GPU-aaaa-111111", "GPU-aaaa-111111"])
    table = "\n".join(lines)
    assert "different GPUs" not in table
    assert "| 0 | baseline | 60.0 | 6,000.0 | 6,100.0 | 0.00e+00 | 1.0000 (1.0000) | NVIDIA H200 …111111 | `(baseline)` |" in table
    assert "| 1 | passed | 61.0 | 6,100.0 | 6,200.0 | 1.00e-05 | 0.9900 (0.9990) | NVIDIA H200 …111111 | `max_chunk_size=4096` |" in table


def test_a_study_that_moved_between_gpus_says_so(tmp_path):
    table = "\n".join(_study_with_trials(tmp_path, ["GPU-aaaa-111111", "GPU-bbbb-222222"]))
    assert "**These trials ran on 2 different GPUs**" in table
    assert "…222222" in table


def test_the_finalists_table_shows_request_time_decode_and_prefill_side_by_side():
    finals = [
        {"round": 1, "trial": 3, "decode_tok_per_s": 57.08, "prefill_tok_per_s": 5928.5,  # ranked by request time
         "verdict": {"qualified": True, "speedup": 1.021, "ranked_by": "request_time", "baseline_values": [56.17, 5553.5]}},
        {"round": 1, "trial": 5, "decode_tok_per_s": 50.0, "prefill_tok_per_s": 5000.0,  # an older row's layout
         "verdict": {"qualified": False, "speedup": 0.9, "baseline": [56.17, 5553.5]}},
        {"round": 1, "trial": 0, "decode_tok_per_s": 56.17, "prefill_tok_per_s": 5553.5, "verdict": {"baseline": True}},
    ]
    # each row's three ratios come from its launches' records by the one estimator (autoresearch.report.ratios),
    # the older row's (its stored 0.9 is a geometric mean) as well
    launches = {(1, 5): FinalistLaunches((2.25, 2.3), Ratios(0.887, 0.890, 0.900)),
                (1, 3): FinalistLaunches((1.97,), Ratios(1.021, 1.016, 1.068)),
                (1, 0): FinalistLaunches((2.0, 2.04), None)}
    rows = render_section("finalists_table", read_finalists(finals, launches)).splitlines()[-3:]
    assert rows[0] == "| 1 | 3 | 57.08 | 5,928.5 | 1.021x | 1.970 | 1.016x | 1.068x | confirmed faster |"
    assert rows[1] == "| 1 | 5 | 50.00 | 5,000.0 | 0.887x | 2.250, 2.300 | 0.890x | 0.900x | not confirmed faster |"
    assert rows[2] == "| 1 | 0 | 56.17 | 5,553.5 | 1.000x | 2.000, 2.040 | 1.000x | 1.000x | baseline |"
    assert "| - |" in render_section("finalists_table", read_finalists(finals[1:]))  # not recomputable: said, not guessed


def test_a_finalists_decision_says_which_and_by_how_much():
    """Before: a qualified row read "confirmed faster", with no interval, and the baseline kept the crown silently."""
    speed = {"verdict": "faster", "speedup": 1.12, "interval": [1.08, 1.15], "margin": 0.02}
    finals = [{"round": 1, "trial": 3, "decode_tok_per_s": 60.0, "prefill_tok_per_s": 5000.0,
               "verdict": {"qualified": True, "speedup": 1.12, "ranked_by": "request_time", "speed": speed,
                           "baseline_values": [50.0, 5000.0],
                           "reason": "faster: request time 1.120x [1.080, 1.150] (margin 2.0%, 2 vs 2 launches)"}},
              {"round": 1, "trial": 4, "decode_tok_per_s": 48.0, "prefill_tok_per_s": 8000.0,
               "verdict": {"qualified": False, "speedup": 0.97, "ranked_by": "request_time", "speed": speed,
                           "baseline_values": [50.0, 5000.0],
                           "reason": "not shown faster: request time 0.970x [0.950, 0.990] (margin 4.0%, 2 vs 2 launches)"}}]
    rows = render_section("finalists_table", read_finalists(finals)).splitlines()[-2:]
    assert rows[0].endswith("| confirmed faster: request time 1.120x [1.080, 1.150] (margin 2.0%, 2 vs 2 launches) |")
    assert rows[1].endswith("| not shown faster: request time 0.970x [0.950, 0.990] (margin 4.0%, 2 vs 2 launches) |")


def test_the_task_tier_reports_every_paired_test_with_its_power(tmp_path):
    import dataclasses

    from eval import EvalStore, GatePolicy, TaskPolicy, compare_taskset, decide
    from tests.eval.test_decision import _big

    store = EvalStore(f"sqlite:///{tmp_path / 'results.db'}")
    base, cand = _big(lose_every=10)
    verdict = compare_taskset(base, cand, TaskPolicy())
    store.save_decision(decide(tasksets=[verdict]), model_manifest_hash="m", candidate_label="s:trial-3:abcdef",
                        baseline_label="s:baseline", policy=GatePolicy())
    plan = SimpleNamespace(study_name="s", model=SimpleNamespace(manifest_hash="m"), gate_policy=GatePolicy())
    text = render_section("task_tier", read_task_tier(plan, store))
    assert "detect a 5% accuracy drop with power 80% when 10% of tasks flip" in text
    assert "Partial credit counts as a wrong answer" in text
    row = f"| 3 | aime25 | rejected | {verdict.tasks_used} / 600 | {verdict.lost} | 0 | {verdict.power:.0%} |"
    assert row in text
    smoke = dataclasses.replace(plan.gate_policy, tasks=TaskPolicy(mode="smoke"))
    smoke_plan = SimpleNamespace(**{**vars(plan), "gate_policy": smoke})
    assert "no paired test ran" in render_section("task_tier", read_task_tier(smoke_plan, store))


def test_the_guard_states_what_each_taskset_can_detect_and_never_merges_or_accepts(tmp_path):
    from autoresearch.report.records import TasksetRow
    from eval import EvalStore, GatePolicy, TaskPolicy, compare_taskset, decide
    from tests.eval.test_guard import _paired

    store = EvalStore(f"sqlite:///{tmp_path / 'results.db'}")
    guard = GatePolicy(tasks=TaskPolicy(mode="guard"))
    pairs = {"aime25": _paired(3, name="aime25"), "mmlu-pro": _paired(10, lost=5, name="mmlu-pro")}
    verdicts = [compare_taskset(b, c, guard.tasks, tasksets=2) for b, c in pairs.values()]
    store.save_decision(decide(tasksets=verdicts), model_manifest_hash="m", candidate_label="s:trial-2:abcdef",
                        baseline_label="s:baseline", policy=guard)
    plan = SimpleNamespace(study_name="s", model=SimpleNamespace(manifest_hash="m"), gate_policy=guard)
    base_rows = [TasksetRow(name, "baseline", base) for name, (base, _) in pairs.items()]
    text = render_section("task_tier", read_task_tier(plan, store, base_rows))
    assert "The task tier ran as a guard" in text and "accepted" not in text
    assert ("**aime25** (3 tasks): **cannot detect any loss** at its false-rejection rate 0.025: even all 3 lost "
            "gives p = 0.125") in text
    assert ("**mmlu-pro** (10 tasks, false-rejection rate 0.025): rejects at 6 tasks lost with none gained; catches "
            "an accuracy drop of 67% with 80% power when nothing else flips, 77% when 10% of the tasks flip") in text
    # only the 5 tasks the baseline answered right can be lost, fewer than the 6 that reject
    assert ("**On this baseline it cannot detect any loss: the baseline answered 5 of 10 right, and only those can "
            "be lost.**") in text
    rows = [line for line in text.splitlines() if line.startswith("| 2 |")]
    assert rows == ["| 2 | aime25 | no loss detected on 3 tasks | 3 | 0 | 0 | 1 | 0.025 | none |",
                    "| 2 | mmlu-pro | no loss detected on 10 tasks | 10 | 5 | 0 | 0.0312 | 0.025 | 67% |"]


def test_decode_per_kind_shows_each_point_its_weight_and_the_champions_acceptance(tmp_path):
    from autoresearch.report.per_kind import read_decode_by_kind

    db = ResultsDB(f"sqlite:///{tmp_path / 'results.db'}")
    plan = {"workload": {"name": "suite-offline", "sha256": "ab" * 32, "weights": {"rg-math": 0.75, "rg-logic": 0.25}},
            "decode_tokens": 128}

    def bench(trial: int, launch: int, math: float, logic: float, acceptance: dict | None = None) -> None:
        payload = {"trial": trial, "round": 1, "launch": launch,
                   "headline": {"decode_tok_per_s_client@1024/rg-math": math,
                                "decode_tok_per_s_client@1024/rg-logic": logic,
                                "prefill_tok_per_s_server@8192": 9000.0},
                   "acceptance": acceptance or {},
                   # the model answers logic in 2 tokens, math in 200 or more (bench's warm-ups measure it)
                   "answers": {"answer_tokens@1024/rg-math": 128.0 + launch, "answer_tokens@1024/rg-logic": 2.0}}
        db.add_measurement(study="s", trial=None, kind="finalist_bench", config_digest=f"c{trial}", payload=payload,
                           launch=launch)

    for launch in (0, 1):
        bench(0, launch, 300.0 + launch, 350.0)
        bench(4, launch, 450.0 + 10 * launch, 340.0, {"spec_acceptance@1024/rg-math": 0.30,
                                                     "spec_acceptance@1024/rg-logic": 0.10})
    view = read_decode_by_kind(db, "s", plan, baseline_trial=0, champion_trial=4)
    assert "round 1 (2 baseline, 2 champion)" in view.source and "suite-offline" in view.workload
    rows = {r.kind: r for r in view.rows}
    # each side's geometric mean over its launches, as the decision takes its estimator
    assert rows["rg-math"].weight == 0.75 and rows["rg-math"].baseline == pytest.approx(math.sqrt(300 * 301)) and \
        rows["rg-math"].champion == pytest.approx(math.sqrt(450 * 460))
    assert rows["rg-logic"].ratio < 1, "a champion slower on one kind shows it"
    lines = render_section("decode_by_kind", view).splitlines()
    assert "| rg-math | 1024 | 0.75 | 300.5 | 455.0 | 1.514x | 30% | 128 |" in lines
    assert "| rg-logic | 1024 | 0.25 | 350.0 | 340.0 | 0.971x | 10% | 2 |" in lines
    header = lines.index("| kind | context | weight | baseline tok/s | champion tok/s | champion vs baseline "
                         "| champion draft acceptance | baseline answer, tokens |")
    assert lines[header - 1] == "", "a table right after a paragraph line is not a Markdown table"
    (warning,) = [line for line in lines if line.startswith("**Decode was timed mostly past")]
    assert "rg-logic @1024 (2 tokens)" in warning and "rg-math" not in warning and "--bench-decode-until eos" in warning
    assert any("decoded exactly 128 tokens (`--bench-decode-until length`" in line for line in lines)  # the mode named
    eos = read_decode_by_kind(db, "s", {**plan, "decode_until": "eos"}, baseline_trial=0, champion_trial=4)
    eos_lines = render_section("decode_by_kind", eos).splitlines()
    assert eos.past_answer == [] and any("timed the model's own answer" in line for line in eos_lines)
    assert eos_lines[eos_lines.index(lines[header]) - 1] == ""


def test_a_smoke_task_tier_is_said_at_the_top():
    """Before: RESULTS.md said the task tier was a smoke check only near its bottom, under the task tables."""
    import datetime

    from eval import GatePolicy, TaskPolicy

    plan = SimpleNamespace(study_name="s", storage_label="sqlite:///results.db", suite="offline", engine="transformers",
                           model=SimpleNamespace(name="tiny", source="embedded", manifest_hash="0" * 64),
                           gate_policy=GatePolicy(tasks=TaskPolicy(mode="smoke")))
    s = SimpleNamespace(plan=plan, generated=datetime.datetime(2026, 12, 2), stopped=None,
                        fidelity_gate={"noise_factor": 3, "min_floor_kl_mean": 1e-4, "min_floor_kl_p99": 1e-3,
                                       "min_floor_top1_disagreement": 0.002},
                        ranking="request time on the workload: T(baseline) / T(candidate)", mix=None, suite_concurrency=None)
    header = render_section("header", s)
    assert "**The task tier ran as a smoke check" in header
    judged = SimpleNamespace(**{**vars(plan), "gate_policy": GatePolicy()})
    assert "smoke" not in render_section("header", SimpleNamespace(**{**vars(s), "plan": judged}))


def test_the_lazy_baselines_row_says_how_far_it_answered_for_later_judgments(tmp_path):
    from autoresearch.report.snapshot import _baseline_tasksets
    from eval.records import SuiteResult, TasksetResult
    from eval.store import EvalStore

    url = f"sqlite:///{tmp_path / 'r.db'}"
    db, store = ResultsDB(url), EvalStore(url)

    def taskset(name: str, tasks: int) -> TasksetResult:
        return TasksetResult(name=name, taskset_id=name, max_tokens=64, tasks=tasks, rollouts=tasks, failures=0,
                             truncations=0, reward_mean=0.5, output_tokens=10 * tasks, model_time_s=1.0,
                             output_tok_per_s=10.0, run_dir="/r", episodes=())

    first = store.save_suite_result(SuiteResult(suite="offline", run_dir="/r",
                                                tasksets=(taskset("rg-math", 8), taskset("rg-logic", 8))),
                                    label="s:baseline", base_url="http://x", plan={}, provenance={})
    db.add_measurement(study="s", trial=0, kind="suite", config_digest="b", payload={"suite_run_id": first})
    assert [r.run for r in _baseline_tasksets(db, store, "s", 0)] == ["baseline", "baseline"]
    for trial, answered in ((2, {"rg-math": 78, "rg-logic": 8}), (3, {"rg-math": 60})):  # a judgment's record
        db.add_measurement(study="s", trial=trial, kind="suite", config_digest="c",
                           payload={"suite_run_id": first, "baseline_answered": answered})
    rows = _baseline_tasksets(db, store, "s", 0)
    assert [(r.name, r.result.tasks) for r in rows] == [("rg-math", 8), ("rg-logic", 8)]  # its own trial's answers
    assert rows[0].run == "baseline (its own trial; 78 answered in all, as judgments needed)"
    assert rows[1].run == "baseline"  # nothing answered past its own trial
