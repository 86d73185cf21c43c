"""RESULTS.md's ratios agree with each other and with the decision: the request time's and its two parts' come
from the same launches by the one estimator (autoresearch.report.ratios), and where the request time's lies outside
its parts' RESULTS.md says why; a section with nothing measured says so in one line.

Real parts: Optuna, the results database, the finalists' stage (confirm_finalists) and the report
(read_snapshot, the template). The launcher and bench are the doubles of tests.autoresearch.fakes: each fresh
launch of the finalist scripted apart, as CPU launches differ.
"""

from __future__ import annotations

import re

import pytest

from autoresearch.crown.finalists import confirm_finalists
from autoresearch.ground.ranked_by import mark_ranked_by_request_time
from autoresearch.measures.ranking import objective_rates, save_request_mix
from autoresearch.measures.request_time import RequestKind, RequestMix
from autoresearch.report.results_md import render
from autoresearch.report.snapshot import read_snapshot
from bench import noise_floor

from .fakes import FakeLauncher, bench_result
from .stage_env import StageEnv

FAST = {"max_chunk_size": 4096}
# one kind of request: 1000 prompt tokens, 100 answer tokens; the baseline takes 1 s for each part
MIX = RequestMix((RequestKind(kind="math", context_tokens=1024, weight=1.0, prompt_tokens=1000, answer_tokens=100),))


def _study(tmp_path, small_model, monkeypatch, finalist: list[tuple[float, float]]) -> StageEnv:
    """A study ranked by request time whose one finalist's fresh launches run at `finalist` (decode, prefill), one
    per launch, against a steady baseline (100, 1000); its finalists' stage run."""
    env = StageEnv.make(tmp_path, small_model, finalists=1, finalist_launches=len(finalist),
                        finalist_max_launches=len(finalist))
    plan = env.plan.bench_plan
    mark_ranked_by_request_time(env.study)
    save_request_mix(env.study, MIX)
    FakeLauncher(speeds={"*": (100.0, 1000.0), env.digest(FAST): finalist}).install(monkeypatch)
    floor = noise_floor(bench_result(plan, 100.0, 1000.0).samples(), bench_result(plan, 100.5, 1005.0).samples())
    env.baseline_done(floor=floor.to_dict(), rates=objective_rates(bench_result(plan, 100.0, 1000.0)))
    trial = env.add_trial(FAST, (150.0, 1500.0), rates=objective_rates(bench_result(plan, 150.0, 1500.0)))
    champion = confirm_finalists(env.plan, env.study, env.space, env.db)
    assert champion.trial == (env.study.trials[0].number if champion.is_baseline else trial)
    return env


def _triples(text: str) -> list[tuple[str, float, float, float]]:
    """Every (where, request, decode, prefill) ratio triple RESULTS.md prints: the champion's line, the finalists'
    rows."""
    found = [("champion", *map(float, m.groups())) for m in re.finditer(
        r"request time ([\d.]+)x faster than the baseline's on the workload \((?:its )?decode(?: part)? ([\d.]+)x, "
        r"prefill(?: part)? ([\d.]+)x", text)]
    table = text.split("## Finalists, re-measured in fresh launches")[1].split("\n## ")[0]
    for line in table.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 9 and cells[1].isdigit() and cells[9] != "baseline":
            found.append((f"trial {cells[2]} (round {cells[1]})", *(float(cells[i].rstrip("x")) for i in (5, 7, 8))))
    return found


def test_a_request_time_outside_its_parts_is_said_why_and_its_parts_come_from_the_same_launches(
        tmp_path, small_model, monkeypatch):
    """Launches that differ (fast decode in one, fast prefill in another, neither in the third): by the decision's
    estimator (each side's geometric mean over its launches) the request time is 1.392x, its decode and prefill
    parts' 1.533x. Before: RESULTS.md printed request time 1.500x beside decode 1.200x and prefill 1.200x (each
    rate's median launch) and said nothing of it."""
    env = _study(tmp_path, small_model, monkeypatch, [(300.0, 1000.0), (100.0, 3000.0), (120.0, 1200.0)])
    text = render(read_snapshot(env.plan, env.study, env.db, env.store))
    triples = _triples(text)
    assert [t[1:] for t in triples] == [pytest.approx((1.392, 1.533, 1.533), abs=5e-4)] * 2  # the champion, its row
    outside = [t for t in triples if not min(t[2], t[3]) <= t[1] <= max(t[2], t[3])]
    for where, request, decode, prefill in outside:  # each said where it is printed: under the champion, the table
        said = f"request time {request:.3f}x lies outside its parts' ratios (decode {decode:.3f}x, prefill {prefill:.3f}x)"
        assert text.count(said) == len(outside), where
    assert "request time 2, 2, 2 / 1.333, 1.333, 1.667 s, decode part 1, 1, 1 / 0.3333, 1, 0.8333 s" in text


def test_launches_alike_give_a_request_time_between_its_parts_and_say_nothing_more(tmp_path, small_model, monkeypatch):
    env = _study(tmp_path, small_model, monkeypatch, [(125.0, 2000.0), (125.0, 2000.0)])
    text = render(read_snapshot(env.plan, env.study, env.db, env.store))
    [(_, request, decode, prefill), _] = _triples(text)
    assert (decode, prefill) == (1.25, 2.0) and decode < request < prefill  # 2 s against 1.3 s: 1.538x
    assert "lies outside" not in text


def test_energy_on_a_run_without_gpu_telemetry_is_one_line(tmp_path, small_model, monkeypatch):
    """Before: a table of dashes, and "the GPU's enforced power limit of - W" (the CPU engine, no NVML)."""
    env = _study(tmp_path, small_model, monkeypatch, [(125.0, 2000.0)] * 2)
    text = render(read_snapshot(env.plan, env.study, env.db, env.store))
    section = text.split("## Energy per request")[1].split("\n## ")[0].strip().splitlines()
    assert section[1:] == ["", "Not measured for any configuration: no GPU telemetry in its bench records (no NVML, "
                               "or recorded before bench measured energy)."]
    assert "power limit of - W" not in text


def test_one_launch_each_puts_the_request_time_between_its_parts_however_the_points_differ(tmp_path, small_model):
    """The search's one launch each, a candidate twice as fast at the workload's decode point (1024) and half as
    fast at the other (8192): decode's objective (the geometric mean over both) is the baseline's, the workload's
    requests are 1.333x sooner. Before: the front read request time 1.333x beside decode 1.000x and prefill 1.000x
    (each objective's ratio), as the Quick start's front read 1.265x beside 1.237x and 1.228x."""
    import dataclasses

    from results import to_jsonable

    env = StageEnv.make(tmp_path, small_model)
    plan = env.plan.bench_plan
    mark_ranked_by_request_time(env.study)
    save_request_mix(env.study, MIX)
    env.baseline_done(rates=objective_rates(bench_result(plan, 100.0, 1000.0)))
    fast, slow = bench_result(plan, 200.0, 1000.0), bench_result(plan, 50.0, 1000.0)
    mixed = dataclasses.replace(fast, decode=tuple(f if f.context_tokens == 1024 else s
                                                   for f, s in zip(fast.decode, slow.decode, strict=True)))
    trial = env.add_trial(FAST, (100.0, 1001.0), rates=objective_rates(mixed))
    env.db.add_measurement(study="stages", trial=trial, kind="bench", config_digest=env.digest(FAST),
                           payload=to_jsonable(mixed.to_dict()))
    text = render(read_snapshot(env.plan, env.study, env.db, env.store))
    front = text.split("## Gated Pareto front")[1].split("\n## ")[0]
    [row] = [line for line in front.splitlines() if line.startswith(f"| {trial} ")]
    request, decode, prefill = (float(c.strip().rstrip("x")) for c in row.split("|")[4:7])
    assert (request, decode, prefill) == (1.333, 2.0, 1.0)


def test_the_baseline_keeping_the_crown_is_said_so_and_no_champion_column_is_a_row_of_dashes(
        tmp_path, small_model, monkeypatch):
    """Before: "**the baseline**: request time 1.000x faster than the baseline's on the workload (decode 1.000x,
    prefill 1.000x)", and decode per kind's champion columns all dashes."""
    env = _study(tmp_path, small_model, monkeypatch, [(90.0, 900.0)] * 2)  # slower in its fresh launches
    text = render(read_snapshot(env.plan, env.study, env.db, env.store))
    champion = text.split("## Champion")[1].split("\n## ")[0]
    assert "**The baseline keeps the crown**: decode 100.00 tok/s, prefill 1,000.0 tok/s (no finalist" in champion
    assert "faster than the baseline's" not in champion
    per_kind = text.split("## Decode per kind")[1].split("\n## ")[0]
    assert "| kind | context | weight | baseline tok/s | baseline answer, tokens |" in per_kind
    assert "champion" not in per_kind.split("| kind |")[1]
