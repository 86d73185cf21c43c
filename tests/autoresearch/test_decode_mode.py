"""Decode is timed on the model's own answers by default; a study measured to a fixed length resumes so.

The server in the bench test is tests.bench.fakes.PrefixCachingFakeServer, a named test double at the
HTTP boundary whose answers end at their EOS unless the request sends ignore_eos, as a model's do.
"""

from __future__ import annotations

import dataclasses

import optuna
import pytest

from autoresearch.__main__ import _bench_plan, make_plan
from autoresearch.cli import parse_args
from autoresearch.ground.errors import PlanError, StudyError
from autoresearch.ground.plan import default_bench_plan
from autoresearch.ground.study import open_study
from autoresearch.measures.objectives import objectives_from_bench
from autoresearch.measures.request_time import RequestMix
from bench import BenchPlan, run_bench
from openai_client import Endpoint
from search_space import SpaceContext, build_space, read_model_info
from tests.bench.fakes import PrefixCachingFakeServer


@pytest.mark.parametrize("engine", ["exllamav3", "transformers"])
def test_the_loops_decode_times_the_models_own_answers_unless_told_otherwise(engine):
    """Before: every decode run went on to --bench-decode-tokens past the answer (ignore_eos), by default."""
    plan = _bench_plan(engine, parse_args([]))
    assert plan.decode_until == "eos" and plan.decode_min_tokens <= plan.decode_tokens
    fixed = _bench_plan(engine, parse_args(["--bench-decode-until", "length"]))
    assert fixed.decode_until == "length" and fixed.digest != plan.digest  # another study's key


def test_a_decode_cap_too_short_to_time_an_answer_is_refused_naming_the_flags():
    with pytest.raises(PlanError) as caught:
        _bench_plan("exllamav3", parse_args(["--bench-decode-tokens", "3"]))
    assert str(caught.value).startswith("--bench-decode-tokens 3: ") and "--bench-decode-until length" in str(caught.value)
    assert _bench_plan("exllamav3", parse_args(["--bench-decode-tokens", "8", "--bench-decode-until",
                                                                "length"])).decode_tokens == 8


@pytest.mark.parametrize("answer_tokens", [0, 3])
def test_answers_too_short_to_time_are_timed_past_them_and_weighed_by_their_own_length(answer_tokens):
    """Before (issue 45): a model answering in 0 or 3 tokens left the point unmeasured (and the real 0.5B's
    2-token rg-logic answers half its runs invalid); earlier still, fixed-length runs read text past the answer as
    its decode. Now: warm-ups find the answers, the runs go on past them to the plan's shortest timed run, and
    request time weighs the kind by the model's own answers."""
    plan = default_bench_plan("transformers")
    with PrefixCachingFakeServer(answer_tokens=answer_tokens) as server:
        result = run_bench(plan, Endpoint(url=server.url))
    decode, _ = objectives_from_bench(result)
    assert decode > 0
    [point] = result.decode
    assert {r.completion_tokens for r in point.valid_runs} == {plan.decode_min_tokens}
    assert all(r.spec.ignore_eos for r in point.runs)
    assert not any(r.spec.ignore_eos for r in point.warmups if r.spec.purpose == "warmup")  # (not a run set aside)
    assert point.answer_tokens_median == answer_tokens
    [kind] = RequestMix.from_bench(result).kinds
    assert kind.answer_tokens == answer_tokens and kind.answer_assumed is None


def _old_study(storage: str, name: str, plan) -> None:
    """A study as the loop stored it when fixed-length decode was the default: its bench plan without
    decode_until, its key made from that plan."""
    old = dataclasses.replace(plan, bench_plan=dataclasses.replace(plan.bench_plan, decode_until="length"))
    assert "decode_until" not in old.bench_plan.to_dict()
    study = optuna.create_study(study_name=name, storage=storage, directions=["maximize", "maximize"])
    for key, value in {"run_key": old.key, "bench_plan": old.bench_plan.to_dict(), "engine": old.engine,
                       "suite": old.suite, "model": {"name": old.model.name, "source": old.model.source,
                                                     "manifest_hash": old.model.manifest_hash}}.items():
        study.set_user_attr(key, value)


def test_a_study_stored_under_the_fixed_length_default_resumes_with_it(tmp_path, tiny_model_dir, monkeypatch):
    """Without the stored mode a resumed study would switch to eos under the same command, and be refused as
    another bench plan (or, keyed alike, mix two ways of timing); an explicit other mode is still refused."""
    monkeypatch.chdir(tmp_path)
    storage = f"sqlite:///{tmp_path / 'results.db'}"
    argv = ["--model", str(tiny_model_dir), "--suite", "none", "--trials", "2", "--storage", storage]
    fresh = make_plan(parse_args([*argv, "--study", "new"]))
    assert fresh.bench_plan.decode_until == "eos"
    _old_study(storage, "old", fresh)
    resumed = make_plan(parse_args([*argv, "--study", "old"]))
    assert resumed.bench_plan.decode_until == "length"
    space = build_space(SpaceContext(engine=resumed.engine, model=read_model_info(resumed.model.path)))
    stored = open_study(resumed, space).user_attrs["bench_plan"]  # the key matched: no StudyError
    assert BenchPlan.from_dict(stored).digest == resumed.bench_plan.digest
    told = make_plan(parse_args([*argv, "--study", "old", "--bench-decode-until", "eos"]))
    with pytest.raises(StudyError, match="another model, engine, suite or bench plan"):
        open_study(told, space)
