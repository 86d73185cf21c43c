"""The suite's concurrency defaults to what the memory model says fits beside the weights under --vram, is one
number per study (stored with its settings, reused on resume), and --suite-concurrency overrides it.

Real parts: the memory model of headers-only exllamav3 checkpoints, Optuna on SQLite; the whole-loop test runs
the night of tests.autoresearch.night_env (its fake launcher and scripted tier are the outside boundaries)."""

from __future__ import annotations

import contextlib
import io
import logging

import pytest

from autoresearch.__main__ import main
from autoresearch.ground.db import ResultsDB
from autoresearch.ground.errors import PlanError
from autoresearch.ground.model_source import ResolvedModel
from autoresearch.ground.plan import RunPlan, default_bench_plan, default_probe_config
from autoresearch.trial.memory import memory_calibration
from autoresearch.trial.suite_concurrency import PROMPT_TOKENS, settle_suite_concurrency
from eval import GatePolicy
from eval.task_decision import TaskPolicy
from search_space import Budget, MemoryModel, SpaceContext, answers_in_flight, build_space, read_model_info
from serving.synthetic.exl3 import QWEN38_27B, write_exl3_checkpoint

from .night_env import NightEnv
from .stage_env import GIB

THINKING = {"max_tokens": 32768}  # a thinking model's long answers (the broad suite's AIME limit)
LARGE_CACHE = {"cache_tokens": 262144}  # a cache that holds 7 such answers: the memory model decides
BUDGET = 5 * GIB // 4  # room for only a few such answers beside the small model's weights
TIGHT = int(1.1 * GIB)  # room for 7 answers of 8K tokens beside the small model's weights, and no more


@pytest.fixture(scope="module")
def model_27b(tmp_path_factory) -> ResolvedModel:
    """Shape-true Qwen3.8-27B, headers only."""
    directory = tmp_path_factory.mktemp("q27b") / "q27b"
    path = write_exl3_checkpoint(directory, QWEN38_27B, sparse=True)
    return ResolvedModel(path=path, name="q27b-sparse", manifest_hash="7" * 64, manifest_path=directory / "m.json",
                         source=str(path))


def _settle(tmp_path, model: ResolvedModel, **kw):
    kw = {"suite": "offline", "trials": 4, "vram_bytes": 24 * GIB, "study_name": "concurrency", "pinned": LARGE_CACHE,
          "storage_url": f"sqlite:///{tmp_path / 'results.db'}", **kw}
    plan = RunPlan(model=model, engine="exllamav3", workdir=tmp_path / "runs", results_md=tmp_path / "RESULTS.md",
                   bench_plan=default_bench_plan("exllamav3"), probe_config=default_probe_config("exllamav3"), **kw)
    space = build_space(SpaceContext(engine="exllamav3", model=read_model_info(model.path)), pinned=plan.pinned)
    return settle_suite_concurrency(plan, space)


def test_a_27b_under_24_gib_answers_fewer_long_thinking_answers_at_once_than_the_suite_sends(tmp_path, model_27b):
    plan, concurrency = _settle(tmp_path, model_27b, suite_overrides=THINKING)
    assert 1 <= concurrency.answers < 8  # the offline suite sends 8
    assert plan.suite_overrides["max_concurrent"] == concurrency.answers
    assert plan.measured_settings["--suite-concurrency"] == concurrency.answers  # stored with the study
    assert not (tmp_path / "results.db").exists()  # deciding created no database
    line = concurrency.line()
    assert line.startswith(f"suite concurrency: {concurrency.answers} answers in flight (fewer than the suite's own 8")
    assert f"an answer of {PROMPT_TOKENS + 32768} tokens takes 2.1 GiB of KV cache" in line
    assert "\n" not in line


def test_a_small_model_answers_at_the_suites_own_concurrency(tmp_path, small_model):
    plan, concurrency = _settle(tmp_path, small_model, suite_overrides={"max_tokens": 16384})  # its cache holds 15
    assert concurrency.answers == 8 and plan.suite_overrides["max_concurrent"] == 8
    assert "(the suite's own 8: " in concurrency.line()


def test_suite_concurrency_given_overrides_the_memory_model(tmp_path, model_27b):
    plan, concurrency = _settle(tmp_path, model_27b, suite_overrides={**THINKING, "max_concurrent": 8})
    assert plan.suite_overrides["max_concurrent"] == 8 and concurrency.answers == 8
    assert concurrency.why == "--suite-concurrency"


def test_not_even_one_answer_beside_the_weights_is_a_one_line_error_naming_the_flags(tmp_path, model_27b):
    with pytest.raises(PlanError) as caught:
        _settle(tmp_path, model_27b, vram_bytes=18 * GIB, suite_overrides=THINKING)
    message = str(caught.value)
    assert "\n" not in message and "not even one answer" in message
    assert "--vram 18.0 GiB" in message and "--suite-concurrency N" in message


def test_without_a_vram_budget_the_suite_keeps_its_own(tmp_path, small_model):
    plan, concurrency = _settle(tmp_path, small_model, vram_bytes=None)
    assert "max_concurrent" not in plan.suite_overrides and concurrency.answers == 8
    assert plan.measured_settings["--suite-concurrency"] is None
    assert _settle(tmp_path, small_model, suite="none")[1] is None


def test_a_resumed_study_reuses_the_number_it_was_measured_at(tmp_path, small_model, monkeypatch, caplog):
    """1.1 GiB and answers of 8K tokens beside the small model, whose 64K cache would hold 7 of them: 7 fit. The
    servers then report peaks above the predictions; the calibration, asked afresh, would now fit fewer: the resume
    keeps the study's number (one number per study: batching can change the numerics)."""
    smoke = GatePolicy(tasks=TaskPolicy(mode="smoke"))
    env = NightEnv.make(tmp_path, small_model, monkeypatch, trials=2, vram_bytes=TIGHT, gate_policy=smoke,
                        suite_overrides={"limit": 40, "max_tokens": 8192}, pinned={"cache_tokens": 65536})
    caplog.set_level(logging.INFO, logger="autoresearch")
    assert env.run() == 0
    study = env.study()
    decided = study.user_attrs["settings"]["--suite-concurrency"]
    assert 1 <= decided < 8
    assert study.user_attrs["suite_concurrency"]["answers"] == decided
    assert f"suite concurrency: {decided} answers in flight (fewer than the suite's own 8" in caplog.text
    assert f"answered {decided} at a time by baseline and candidates alike" in env.plan.results_md.read_text()

    db = ResultsDB(env.plan.storage_url)
    db.add_measurement(study="night", trial=0, kind="memory", config_digest="x",
                       payload={"predicted_peak_bytes": GIB // 2, "measured_peak_bytes": GIB // 2 + GIB // 8})
    memory = MemoryModel(read_model_info(small_model.path))
    space = build_space(SpaceContext(engine="exllamav3", model=read_model_info(small_model.path)),
                        pinned={"cache_tokens": 65536})
    afresh = answers_in_flight(memory, space.baseline_config(), Budget(vram_bytes=TIGHT),
                               memory_calibration(db, "night"), tokens_per_answer=PROMPT_TOKENS + 8192, most=8)
    assert afresh.answers < decided  # what a decision made now would give

    caplog.clear()
    env.replace(trials=3)
    assert env.run() == 0  # not refused: the stored number is this run's
    assert env.study().user_attrs["settings"]["--suite-concurrency"] == decided
    assert f"suite concurrency: {decided} answers in flight (as this study was measured: fewer than" in caplog.text

    out = io.StringIO()
    with contextlib.redirect_stdout(out):  # the plan command plans at the study's number too
        main(["plan", "--study", "night", "--storage", env.plan.storage_url, "--hours", "8"])
    assert f"at the suite's {decided} requests in flight" in out.getvalue()


def test_the_pinned_cache_holds_fewer_answers_than_fit_beside_the_weights(tmp_path, model_27b):
    """The README's "On your GPU" pins a 32K cache: exllamav3 admits only the answers whose whole budget its cache
    holds, so 6 answers of 4,096 tokens are in flight, not the 8 that fit beside the weights."""
    plan, concurrency = _settle(tmp_path, model_27b, pinned={"cache_tokens": 32768})
    assert concurrency.answers == 6 and plan.suite_overrides["max_concurrent"] == 6
    assert "held by the baseline's cache" in concurrency.line()
    assert "the configuration's cache of 32768 tokens holds 6 at once" in concurrency.line()


def test_a_cache_smaller_than_one_answer_answers_one_at_a_time_and_says_so(tmp_path, model_27b):
    plan, concurrency = _settle(tmp_path, model_27b, pinned={"cache_tokens": 32768}, suite_overrides=THINKING)
    assert concurrency.answers == 1 and plan.suite_overrides["max_concurrent"] == 1
    assert "holds one at a time, its answer cut to the cache's room" in concurrency.line()

