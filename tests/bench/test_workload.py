"""Decode on a workload: the user's own tasks by kind, weighted, behind their system prompt."""

from __future__ import annotations

import json

import pytest

from bench import BenchPlan, Workload, WorkloadKind, run_bench
from bench.corpus import CorpusItem
from bench.errors import BenchConfigError
from bench.prompts import PromptSource
from openai_client import Endpoint
from tests.bench.fakes import PrefixCachingFakeServer

SYSTEM = "Answer the question by thinking step by step, then give the answer in <answer></answer> tags. " * 4


def _items(kind: str, n: int, words: int = 30) -> tuple[CorpusItem, ...]:
    return tuple(
        CorpusItem(id=f"{kind}-{i}", kind=kind, text=f"Task {i} of {kind}: " + " ".join(f"w{i}x{j}" for j in range(words)),
                   answer=str(i * 7))
        for i in range(n)
    )


def _workload(**fields) -> Workload:
    return Workload(
        name="suite-test",
        kinds=(WorkloadKind(name="rg-math", weight=600, items=_items("rg-math", 6), system=SYSTEM),
               WorkloadKind(name="rg-logic", weight=200, items=_items("rg-logic", 6, words=80), system=SYSTEM)),
        request_fields=fields or {"chat_template_kwargs": {"enable_thinking": True}},
    )


def test_a_workload_round_trips_through_its_file_and_keeps_its_digest(tmp_path):
    wl = _workload()
    wl.save(tmp_path / "w.json")
    back = Workload.load(tmp_path / "w.json")
    assert back == wl and back.sha256 == wl.sha256
    assert wl.weights() == {"rg-math": 0.75, "rg-logic": 0.25}
    assert wl.summary()["weights"] == wl.weights() and wl.summary()["sha256"] == wl.sha256
    assert _workload(other=1).sha256 != wl.sha256, "the request fields are part of what was measured"


def test_bad_workloads_are_refused_with_the_reason(tmp_path):
    with pytest.raises(BenchConfigError, match="at least 2 tasks"):
        WorkloadKind(name="k", weight=1, items=_items("k", 1))
    with pytest.raises(BenchConfigError, match="weight must be positive"):
        WorkloadKind(name="k", weight=0, items=_items("k", 2))
    with pytest.raises(BenchConfigError, match="one word"):
        WorkloadKind(name="a/b", weight=1, items=_items("k", 2))
    with pytest.raises(BenchConfigError, match="unique"):
        Workload(name="w", kinds=(WorkloadKind(name="k", weight=1, items=_items("k", 2)),) * 2)
    (tmp_path / "bad.json").write_text(json.dumps({"name": "x"}))
    with pytest.raises(BenchConfigError, match="not a workload"):
        Workload.load(tmp_path / "bad.json")
    with pytest.raises(BenchConfigError, match="cannot read workload"):
        Workload.load(tmp_path / "missing.json")


def test_workload_prompts_open_with_their_nonce_and_carry_the_system_prompt_and_fields():
    source = PromptSource("s1", workload=_workload())
    prompts = [source.decode("rg-logic", 3000, serial) for serial in range(1, 9)]
    for p in prompts:
        assert p.system.endswith(SYSTEM) and p.system != SYSTEM, "the nonce opens the system prompt"
        assert p.fields == {"chat_template_kwargs": {"enable_thinking": True}}
        assert p.text.startswith("Solved tasks of this kind first") and "Task " in p.text.split("Your task.")[-1]
        assert 2700 <= p.chars <= 3000, p.chars
    firsts = {p.system.split(".")[0] for p in prompts}
    assert len(firsts) == len(prompts), "no two prompts share their first word"
    short = source.decode("rg-math", 50, 99)
    assert short.text.startswith("Task "), "a task about as long as asked is sent alone, as a user sends it"


def test_the_plan_takes_only_the_workloads_kinds_and_records_their_weights():
    wl = _workload()
    plan = BenchPlan(decode_kinds=wl.kind_names, workload=wl.summary(), gpu_index=None)
    assert plan.workload["weights"] == {"rg-math": 0.75, "rg-logic": 0.25}  # the objective weights by these
    with pytest.raises(BenchConfigError, match="each must be one of rg-math, rg-logic"):
        BenchPlan(decode_kinds=("math",), workload=wl.summary())
    with pytest.raises(BenchConfigError, match="each must be one of math, code, mc"):
        BenchPlan(decode_kinds=("rg-math",))
    assert plan.digest != BenchPlan(decode_kinds=wl.kind_names, workload=_workload(x=1).summary(),
                                    gpu_index=None).digest


_SMALL = dict(prefill_tokens=(), decode_context_tokens=(400,), decode_tokens=8, min_repeats=3, max_repeats=3,
              warmup_requests=1, gpu_index=None, decode_target_rel_ci=0.5)


def test_a_workload_decode_on_a_caching_server_is_valid_and_sends_what_the_workload_says():
    """A system prompt shared by every task would be cached: the nonce before it keeps every run valid."""
    wl = _workload()
    plan = BenchPlan(decode_kinds=wl.kind_names, workload=wl.summary(), **{**_SMALL, "prefill_tokens": (300,)})
    with PrefixCachingFakeServer(system_prompt="You are a default system prompt of the template.",
                                 page_tokens=1) as fake:  # test double: a paged prefix cache
        result = run_bench(plan, Endpoint(url=fake.url), workload=wl)
    # bench's own prompts open with the template's default system prompt, the workload's with their own:
    # the opening is learned from bench's, so neither kind of prompt is taken for a cache hit
    assert result.server.shared_prefix_tokens >= len("You are a default system prompt") // 4
    assert len(result.prefill[0].valid_runs) == 3, result.prefill[0].invalid_reasons
    assert [d.key for d in result.decode] == ["decode@400/rg-math", "decode@400/rg-logic"]
    for point in result.decode:
        assert len(point.valid_runs) == 3, point.invalid_reasons
        assert {r.spec.prompt_kind for r in point.runs} == {point.kind}
    workload_bodies = [b for b in fake.bodies if b["messages"][0]["role"] == "system"]
    assert workload_bodies and all(b["chat_template_kwargs"] == {"enable_thinking": True} for b in workload_bodies)
    assert all(b["messages"][0]["content"].endswith(SYSTEM) for b in workload_bodies)
    assert result.plan["workload"]["weights"] == {"rg-math": 0.75, "rg-logic": 0.25}


def test_a_plan_and_a_workload_that_do_not_match_are_refused_before_any_request():
    wl = _workload()
    plan = BenchPlan(decode_kinds=wl.kind_names, workload=wl.summary(), **_SMALL)
    with pytest.raises(BenchConfigError, match="pass the workload file"):
        run_bench(plan, Endpoint(url="http://127.0.0.1:9"), workload=None)
    with pytest.raises(BenchConfigError, match="pass the workload file"):
        run_bench(BenchPlan(**_SMALL), Endpoint(url="http://127.0.0.1:9"), workload=wl)


@pytest.mark.slow
def test_this_projects_server_is_measured_on_a_workload(tiny_server, tmp_path):
    """The real server process over HTTP: a system message and the thinking switch, per-kind decode points."""
    wl = _workload()
    plan = BenchPlan(decode_kinds=wl.kind_names, workload=wl.summary(),
                     **{**_SMALL, "decode_context_tokens": (256,), "max_repeats": 3})
    result = run_bench(plan, Endpoint(url=tiny_server.url), workload=wl)
    assert [d.kind for d in result.decode] == ["rg-math", "rg-logic"]
    for point in result.decode:
        assert len(point.valid_runs) >= 3, point.invalid_reasons
        assert point.decode_tok_per_s_client is not None


def test_the_command_measures_a_workload_file_and_records_its_summary(tmp_path, capsys):
    from bench.__main__ import main

    wl = _workload()
    wl.save(tmp_path / "w.json")
    with PrefixCachingFakeServer(page_tokens=1) as fake:  # test double: a paged prefix cache
        code = main(["--url", fake.url, "--no-gpu", "--prefill", "none", "--decode", "400", "--workload",
                     str(tmp_path / "w.json"), "--decode-tokens", "8", "--repeats", "3", "--max-repeats", "3",
                     "--json", str(tmp_path / "r.json")])
    assert code == 0, capsys.readouterr()
    stored = json.loads((tmp_path / "r.json").read_text())
    assert [d["kind"] for d in stored["decode"]] == ["rg-math", "rg-logic"]
    assert stored["plan"]["workload"]["sha256"] == wl.sha256
    assert main(["--url", fake.url, "--no-gpu", "--workload", str(tmp_path / "missing.json")]) == 2
