""".ci/gpu/tabby_compare.py, the CPU half of .ci/gpu/tabby-compare.sh (its launches are the GPU run's): the
committed study's export made deployable changes no measured key and stays within TabbyAPI's schema, the
bench flags rebuild the study's plan, and the table gives ratios only for sides that were measured."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import optuna
import pytest
import yaml

from autoresearch.__main__ import main
from autoresearch.measures.request_time import RequestKind, RequestMix

from .test_minimal_champion import measure_the_round_it_predates
from .test_objectives import _result
from .test_tabbyapi_export import validate

ROOT = Path(__file__).resolve().parents[2]
LEVERS = ROOT / "examples" / "real-0.5b-levers" / "results.db"
MODEL = Path("/tmp/real-model/exl3-4.0")


def _module():
    spec = importlib.util.spec_from_file_location("tabby_compare", ROOT / ".ci/gpu/tabby_compare.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def work(tmp_path, monkeypatch):
    db = tmp_path / "results.db"
    shutil.copy(LEVERS, db)
    url = f"sqlite:///{db}"
    measure_the_round_it_predates(url, monkeypatch)  # the minimal champion against the baseline
    _as_if_shown_faster(url)
    assert main(["export", "--study", "lever-study", "--storage", url, "--format", "tabbyapi",
                 "--out", str(tmp_path / "tabby-export")]) == 0
    assert main(["export", "--study", "lever-study", "--storage", url, "--out", str(tmp_path / "champion.json")]) == 0
    return tmp_path


def _as_if_shown_faster(url: str) -> None:
    """A scripted verdict, named as such: the minimal champion shown faster than the baseline, so export writes it.
    (The real round, pooled with the study's six baseline launches, does not show it: test_minimal_champion.)"""
    from autoresearch.champion.change_costs import MINIMIZATION_ATTR

    study = optuna.load_study(study_name="lever-study", storage=url)
    attrs = dict(study.user_attrs[MINIMIZATION_ATTR])
    cost = attrs["versus_baseline"]["cost"]
    attrs["versus_baseline"] = {"cost": cost | {"request": [cost["request"][0], 1.1, 1.3], "verdict": "faster"},
                                "reason": ""}
    study.set_user_attr(MINIMIZATION_ATTR, attrs)


def test_prepare_sets_only_deployment_keys_within_tabbyapis_schema_and_the_studys_bench_plan(work, capsys):
    assert _module().prepare(work, str(work / "results.db"), "lever-study", MODEL, 18731) == 0
    exported = yaml.safe_load((work / "tabby-export" / "config.yml").read_text())
    deployed = yaml.safe_load((work / "tabby-config.yml").read_text())
    validate(deployed)
    assert deployed["network"] == {"host": "127.0.0.1", "port": 18731, "disable_auth": True, "api_servers": ["oai"]}
    assert not any(deployed["logging"].values())
    assert {k: v for k, v in deployed.items() if k not in ("network", "logging")} == exported  # same model folder here
    # the minimal champion kept only suffix drafting (hybrid_draft_tokens=4), which has no TabbyAPI key: what
    # TabbyAPI runs of it is exllamav3's defaults (chunk 2048), and our server runs that subset too
    assert deployed["model"]["chunk_size"] == 2048 and deployed["draft_model"] == {"draft_mode": "disabled"}
    subset = json.loads((work / "subset.json").read_text())["args"]
    assert (subset["hybrid_draft_tokens"], subset["shared_chunk_size"], subset["prefill_cooldown"]) == (0, None, 4)
    assert (work / "bench-args").read_text().split() == [
        "--prefill", "8192", "--decode", "1024", "--decode-kinds", "math", "--decode-tokens", "256", "--decode-until",
        "eos", "--decode-min-tokens", "16", "--repeats", "3", "--max-repeats", "5", "--warmup", "2",
        "--prefill-target-ci", "0.05", "--decode-target-ci", "0.02", "--api", "chat", "--timeout", "900.0"]
    assert "not equivalent" in capsys.readouterr().out


def test_deploy_moves_the_model_folder_and_nothing_measured():
    tree = {"model": {"model_dir": "/a", "model_name": "b", "chunk_size": 4096}, "draft_model": {"draft_mode": "ngram"}}
    out = _module().deploy(tree, Path("/models/q"), 5000)
    assert out["model"] == {"model_dir": "/models", "model_name": "q", "chunk_size": 4096}
    assert out["draft_model"] == tree["draft_model"] and tree["model"]["model_dir"] == "/a"  # the input is untouched


def _write(work: Path, name: str, decode: float, prefill: float, *, server_timed: bool) -> None:
    result = _result({8192: [prefill] * 3}, {(1024, "math"): [decode] * 3}, server_timed=server_timed)
    (work / f"bench-{name}.json").write_text(json.dumps(result.to_dict()))


MIX = RequestMix((RequestKind(kind="math", context_tokens=1024, weight=1.0, prompt_tokens=1000, answer_tokens=200),))


def test_the_table_compares_client_timed_rates_and_names_each_ratio(tmp_path):
    module = _module()
    for r in (0, 1):
        _write(tmp_path, f"tabby-{r}", 90.0, 50_000.0, server_timed=False)  # TabbyAPI reports no server timings
        _write(tmp_path, f"ours-{r}", 100.0, 50_000.0, server_timed=True)
        _write(tmp_path, f"subset-{r}", 90.0, 50_000.0, server_timed=True)
    results = {arm: [module.BenchResult.from_dict(json.loads(p.read_text()))
                     for p in sorted(tmp_path.glob(f"bench-{arm}-*.json"))] for arm in ("tabby", "ours", "subset")}
    summary = module.summarize(MIX, results)
    ours, tabby = summary["arms"]["ours"], summary["arms"]["tabby"]
    assert ours["measured_launches"] == 2 and tabby["decode_tok_per_s"] == pytest.approx(90.0, rel=1e-6)
    assert summary["ratios"]["tabby/subset"]["request_time"] == pytest.approx(1.0)
    # the same prefill, decode 0.9x: the 200 answer tokens dominate the request
    assert 1.05 < summary["ratios"]["tabby/ours"]["request_time"] < 1.111
    assert summary["ratios"]["tabby/ours"]["decode"] == pytest.approx(0.9, rel=1e-6)
    assert "tabby/ours: request time" in module.render(summary)


def test_a_side_without_a_measured_launch_gets_no_ratio(tmp_path):
    module = _module()
    _write(tmp_path, "ours-0", 100.0, 50_000.0, server_timed=True)
    summary = module.summarize(MIX, {"tabby": [], "ours": [module.BenchResult.from_dict(
        json.loads((tmp_path / "bench-ours-0.json").read_text()))]})
    assert summary["ratios"] == {} and "NOT MEASURED" in module.render(summary)


def test_prepare_runs_the_subset_the_minimization_measured_faster_on_our_server_too(work, tmp_path):
    """When the confirmed champion's expressible subset was measured faster than the minimal champion's, export
    writes it for TabbyAPI while champion.json stays the minimal champion: the subset arm runs the same config."""
    from autoresearch.champion.change_costs import MINIMIZATION_ATTR
    from autoresearch.champion.tabbyapi import expressible_subset
    from serving.config import ServingConfig

    url = f"sqlite:///{work / 'results.db'}"
    study = optuna.load_study(study_name="lever-study", storage=url)
    attrs = dict(study.user_attrs[MINIMIZATION_ATTR])
    full = expressible_subset(ServingConfig.from_dict(study.user_attrs["champion"]["config"]), hybrid=False)
    cost = {"request": [0.95, 0.9, 1.0], "decode": [0.9, 0.85, 0.95], "prefill": [1.0, 0.9, 1.1], "verdict": "same",
            "launches": 2}
    attrs["extra"] = {**attrs["extra"], "tabbyapi_subset": {"of": "champion", "digest": full.digest,
                                                            "config": full.to_dict(), "cost": cost, "tried": []}}
    study.set_user_attr(MINIMIZATION_ATTR, attrs)
    assert main(["export", "--study", "lever-study", "--storage", url, "--format", "tabbyapi",
                 "--out", str(work / "tabby-export")]) == 0
    assert _module().prepare(work, str(work / "results.db"), "lever-study", MODEL, 18731) == 0
    assert yaml.safe_load((work / "tabby-config.yml").read_text())["model"]["chunk_size"] == 16384
    assert ServingConfig.from_json((work / "subset.json").read_text()).digest == full.digest
    champion = ServingConfig.from_json((work / "champion.json").read_text())
    assert champion.args.hybrid_draft_tokens == 4 and champion.args.max_chunk_size == 2048  # still the minimal one
