"""A suite's decode workload: its own tasks where they are on this machine, stand-ins that say so elsewhere."""

from __future__ import annotations

import pytest

from autoresearch.ground.workload import suite_workload
from eval.errors import EvalConfigError
from eval.suites import SuiteOverrides, apply_overrides, get_suite
from eval.tasksets.logic import task_rows


def test_the_offline_suites_workload_is_its_own_tasks_in_run_order_weighted_by_task_count():
    suite = get_suite("offline")
    wl = suite_workload(suite, per_kind=6)
    assert wl.kind_names == ("rg-math", "rg-logic")
    assert wl.weights() == {"rg-math": 0.5, "rg-logic": 0.5}  # 600 tasks each
    assert wl.request_fields == {"chat_template_kwargs": {"enable_thinking": True}}
    logic = wl.kind("rg-logic")
    spec = suite.taskset("rg-logic")
    knobs = dict(spec.knobs)
    expected = [r for r, _ in zip(task_rows(knobs["generators"], knobs["size_per_generator"], 0), range(6), strict=False)]
    assert [i.id for i in logic.items] == [r["id"] for r in expected]
    assert [i.text for i in logic.items] == [r["prompt"] for r in expected]
    assert logic.system == expected[0]["system_prompt"] and "<answer>" in logic.system
    assert all(k.proxy is None for k in wl.kinds)


def test_a_shrunk_suite_gives_no_more_tasks_than_it_runs():
    wl = suite_workload(apply_overrides(get_suite("offline"), SuiteOverrides(limit=3)), per_kind=64)
    assert [len(k.items) for k in wl.kinds] == [3, 3]
    wl = suite_workload(apply_overrides(get_suite("offline"), SuiteOverrides(limit=1)), per_kind=64)
    assert [len(k.items) for k in wl.kinds] == [2, 2], "one asked, one as context: the least a kind needs"


def test_prime_tasksets_are_stood_in_for_by_the_corpus_and_weighted_as_the_suite_weights_them():
    wl = suite_workload(get_suite("broad"), per_kind=4)
    assert wl.weights() == pytest.approx({"aime25": 3 / 20, "mmlu-pro": 10 / 20, "i3-logic": 4 / 20,
                                          "livecodebench": 3 / 20})
    assert all(k.proxy and "bench corpus" in k.proxy for k in wl.kinds)
    assert wl.summary()["proxies"]["livecodebench"].startswith("bench corpus 'code'")
    full = suite_workload(get_suite("full"), per_kind=4)
    assert set(full.weights().values()) == {0.2} and "equal" in full.description


def test_too_few_tasks_are_refused():
    with pytest.raises(EvalConfigError, match="at least 2"):
        suite_workload(get_suite("offline"), per_kind=1)


def test_the_command_writes_the_workload_bench_reads(tmp_path, capsys):
    from autoresearch.__main__ import main
    from bench import Workload

    assert main(["workload", "--suite", "offline", "--limit", "3", "--out", str(tmp_path / "w.json")]) == 0
    wl = Workload.load(tmp_path / "w.json")
    assert [len(k.items) for k in wl.kinds] == [3, 3]
    assert wl.sha256[:16] in capsys.readouterr().out
    assert main(["workload", "--suite", "offline", "--per-kind", "1", "--out", str(tmp_path / "x.json")]) == 1
    assert not (tmp_path / "x.json").exists()
