"""The TabbyAPI export: config.yml keys and value forms checked against TabbyAPI's own schema, encoded from its
public source in autoresearch/champion/tabbyapi_config_schema.json (not by importing TabbyAPI), and what it cannot express."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from autoresearch.__main__ import main
from autoresearch.champion.tabbyapi import expressible_subset, to_tabbyapi
from autoresearch.champion.tabbyapi_schema import config_problems
from serving.config import ServingConfig

EXAMPLE = Path(__file__).parents[2] / "examples" / "real-0.5b-own-answers" / "results.db"
MODEL = Path("/models/q27")


def validate(tree: dict) -> None:
    """Every key is one TabbyAPI's schema declares (it would ignore any other silently), in its value form."""
    problems = config_problems(tree)
    assert not problems, "; ".join(problems)


def _config(args: dict | None = None, env: dict | None = None) -> ServingConfig:
    return ServingConfig.from_dict({"engine": "exllamav3", "args": args or {}, "env": env or {}})


CASES = {
    "defaults": {},
    "q8 cache": {"cache_kind": "quant", "cache_k_bits": 8, "cache_v_bits": 8},
    "asymmetric cache": {"cache_kind": "quant", "cache_k_bits": 4, "cache_v_bits": 6},
    "ngram": {"draft_mode": "ngram", "ngram_match_min": 3, "num_draft_tokens": 10, "max_chunk_size": 8192},
    "mtp": {"draft_mode": "mtp", "num_draft_tokens": 3},
    "draft model": {"draft_mode": "draft_model", "draft_model_dir": "/models/qwen-0.8b"},
    "dflash2": {"draft_mode": "dflash", "draft_model_dir": "/models/q27-dflash2", "num_draft_tokens": 7,
                "max_chunk_size": 4096, "cache_tokens": 65536},
    "everything Tabby lacks": {"draft_mode": "mtp", "sparse_draft_head": 4096, "hybrid_draft_tokens": 8,
                               "prefill_cooldown": 2, "max_chunk_size": 4096, "shared_chunk_size": 1024,
                               "recurrent_dtype": "float", "dynamic_draft_tokens": True, "draft_confidence": 0.6},
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("hybrid", [False, True])
def test_every_exported_key_is_one_tabbyapis_schema_accepts_in_its_value_form(name, hybrid):
    export = to_tabbyapi(_config(CASES[name], {"EXL3_QKV_SLICE": "0"}), model_path=MODEL, hybrid=hybrid)
    validate(yaml.safe_load(yaml.safe_dump(export.config)))
    assert export.env == {"EXL3_QKV_SLICE": "0"}


def test_the_validator_refuses_what_tabbyapi_would_drop_or_reject():
    with pytest.raises(AssertionError, match="not in TabbyAPI's schema"):
        validate({"draft_model": {"hybrid_draft_tokens": 4}})
    with pytest.raises(AssertionError, match="not one of"):
        validate({"draft_model": {"draft_cache_mode": "8,8"}})  # the pair form: the draft schema refuses it
    with pytest.raises(AssertionError, match="multiple"):
        validate({"model": {"cache_size": 1000}})


def test_cache_modes_take_tabbyapis_names_where_it_has_one_and_the_pair_form_otherwise():
    modes = {name: to_tabbyapi(_config(CASES[name]), model_path=MODEL, hybrid=False).config["model"]["cache_mode"]
             for name in ("defaults", "q8 cache", "asymmetric cache")}
    assert modes == {"defaults": "FP16", "q8 cache": "Q8", "asymmetric cache": "4,6"}


def test_drafting_maps_to_tabbyapis_draft_modes():
    ngram = to_tabbyapi(_config(CASES["ngram"]), model_path=MODEL, hybrid=False)
    assert ngram.config["draft_model"] == {"draft_mode": "ngram", "ngram_match_min": 3, "draft_num_tokens": 10}
    assert ngram.config["model"]["chunk_size"] == 8192 and ngram.equivalent
    drafter = to_tabbyapi(_config(CASES["draft model"]), model_path=MODEL, hybrid=False).config["draft_model"]
    assert drafter["draft_mode"] == "model" and (drafter["draft_model_dir"], drafter["draft_model_name"]) == \
        ("/models", "qwen-0.8b")
    assert to_tabbyapi(_config(), model_path=MODEL, hybrid=False).config["draft_model"] == {"draft_mode": "disabled"}


def test_a_dflash2_champion_is_tabbyapis_draft_model_with_its_draft_length_and_an_fp16_draft_cache():
    """TabbyAPI detects DFlash/DFlash2 from the drafter's architecture under draft_mode 'model'; its draft cache
    takes FP16/Q8/Q6/Q4 only, and our server's draft cache is fp16. Read back through YAML, as Tabby reads it."""
    export = to_tabbyapi(_config(CASES["dflash2"]), model_path=MODEL, hybrid=True)
    tree = yaml.safe_load(yaml.safe_dump(export.config))
    validate(tree)
    assert tree["draft_model"] == {"draft_mode": "model", "draft_model_dir": "/models", "draft_model_name": "q27-dflash2",
                                   "draft_cache_mode": "FP16", "draft_num_tokens": 7}
    assert (tree["model"]["cache_size"], tree["model"]["chunk_size"]) == (65536, 4096)
    assert export.equivalent
    sparse = to_tabbyapi(_config({**CASES["dflash2"], "sparse_draft_head": 8192}), model_path=MODEL, hybrid=True)
    assert [u.field for u in sparse.unexpressed] == ["sparse_draft_head"] and not sparse.equivalent


def test_tabbyapis_own_defaults_are_overridden_with_ours():
    """TabbyAPI's max_batch_size (4 on recurrent models), output chunking and cudaMallocAsync differ from ours."""
    model = to_tabbyapi(_config(), model_path=MODEL, hybrid=False).config
    assert model["model"]["max_batch_size"] == 256 and model["model"]["output_chunking"] is False
    assert model["memory"] == {"sysmem_recurrent_cache": 4096, "cuda_malloc_async": False}
    assert to_tabbyapi(_config(), model_path=MODEL, hybrid=True).config["model"]["max_batch_size"] == 16


def test_what_tabbyapi_cannot_express_is_listed_and_the_export_is_not_called_equivalent():
    config = _config(CASES["everything Tabby lacks"])
    export = to_tabbyapi(config, model_path=MODEL, hybrid=False)
    assert not export.equivalent
    assert {u.field for u in export.unexpressed} == {"sparse_draft_head", "hybrid_draft_tokens", "prefill_cooldown",
                                                     "shared_chunk_size", "recurrent_dtype", "draft_confidence"}
    assert export.config["draft_model"]["dynamic_draft"] is True  # main @e632af4 has draft_model.dynamic_draft
    subset = expressible_subset(config, hybrid=False)
    assert to_tabbyapi(subset, model_path=MODEL, hybrid=False).equivalent
    assert (subset.args.draft_mode, subset.args.max_chunk_size, subset.args.prefill_cooldown) == ("mtp", 4096, 4)


def test_dynamic_drafting_is_expressed_with_a_draft_mode_and_not_for_suffix_drafting_alone():
    mtp = to_tabbyapi(_config({"draft_mode": "mtp", "dynamic_draft_tokens": True}), model_path=MODEL, hybrid=True)
    assert mtp.equivalent and mtp.config["draft_model"] == {"draft_mode": "mtp", "dynamic_draft": True}
    assert "dynamic_draft" not in to_tabbyapi(_config(CASES["ngram"]), model_path=MODEL, hybrid=False).config["draft_model"]
    suffix = _config({"hybrid_draft_tokens": 8, "dynamic_draft_tokens": True})
    export = to_tabbyapi(suffix, model_path=MODEL, hybrid=False)
    assert {u.field for u in export.unexpressed} == {"hybrid_draft_tokens", "dynamic_draft_tokens"}
    assert export.config["draft_model"] == {"draft_mode": "disabled"}
    assert to_tabbyapi(expressible_subset(suffix, hybrid=False), model_path=MODEL, hybrid=False).equivalent


def test_more_recurrent_slots_than_the_batch_cannot_be_expressed_on_a_hybrid_model():
    config = _config({"max_batch_size": 4})  # 16 slots by default
    assert [u.field for u in to_tabbyapi(config, model_path=MODEL, hybrid=True).unexpressed] == ["cache_slots"]
    assert to_tabbyapi(config, model_path=MODEL, hybrid=False).equivalent


def test_export_format_tabbyapi_writes_config_env_and_what_it_cannot_express(tmp_path, capsys):
    db = tmp_path / "results.db"
    shutil.copy(EXAMPLE, db)
    code = main(["export", "--study", "drafting-eos", "--storage", f"sqlite:///{db}", "--format", "tabbyapi",
                 "--out", str(tmp_path / "tabby")])
    assert code == 0
    tree = yaml.safe_load((tmp_path / "tabby" / "config.yml").read_text())
    validate(tree)
    assert tree["draft_model"] == {"draft_mode": "ngram", "ngram_match_min": 3, "draft_num_tokens": 10}
    assert (tmp_path / "tabby" / "exl3.env").read_text().splitlines()[2:] == ["EXL3_INT8_GEMV=1", "EXL3_QKV_SLICE=0"]
    captured = capsys.readouterr()
    printed = captured.out
    assert "Not equivalent" in printed and "hybrid_draft_tokens=4" in printed and "prefill_cooldown=3" in printed
    assert "Not equivalent" in (tmp_path / "tabby" / "NOT-EXPRESSED.md").read_text()
    # before: nothing said that no gate judged the subset TabbyAPI runs (a study minimized before it was judged)
    header = (tmp_path / "tabby" / "config.yml").read_text().splitlines()[1]
    assert header.startswith("# gate of what TabbyAPI runs (config digest ") and ": NOT JUDGED: " in header
    assert "has not passed the gate: NOT JUDGED" in captured.err


def test_a_tabbyapi_config_whose_configuration_passed_its_gate_is_exported_saying_so(tmp_path, capsys):
    """The minimal champion here is all TabbyAPI-expressible: what TabbyAPI runs is it, judged by its gate."""
    url, _ = _with_minimization(tmp_path, gate={"passed": True, "reason": "judged as a candidate (fidelity)"})
    assert main(["export", "--study", "drafting-eos", "--storage", url, "--format", "tabbyapi",
                 "--out", str(tmp_path / "tabby")]) == 0
    header = (tmp_path / "tabby" / "config.yml").read_text().splitlines()[1]
    assert header.endswith(": passed (the minimal champion's gate): judged as a candidate (fidelity)")
    assert "has not passed" not in capsys.readouterr().err


def _with_a_stray_key(monkeypatch) -> None:
    """to_tabbyapi's double: a key TabbyAPI's schema does not declare (TabbyAPI would drop it without a word)."""
    import autoresearch.champion.export as export_module
    from autoresearch.champion.tabbyapi import TabbyExport

    real = export_module.to_tabbyapi

    def with_a_stray_key(config, **kw) -> TabbyExport:
        export = real(config, **kw)
        return TabbyExport(config={**export.config, "draft_model": {**export.config["draft_model"],
                                                                    "hybrid_draft_tokens": 4}},
                           env=export.env, unexpressed=export.unexpressed)

    monkeypatch.setattr(export_module, "to_tabbyapi", with_a_stray_key)


def test_a_written_config_with_a_key_tabbyapi_would_drop_is_refused_and_leaves_nothing(tmp_path, monkeypatch, capsys):
    """TabbyAPI ignores a key it does not declare without a word: export reads its file back and says so. Before:
    the refused config.yml stayed on disk (written before it was read back)."""
    _with_a_stray_key(monkeypatch)
    db = tmp_path / "results.db"
    shutil.copy(EXAMPLE, db)
    code = main(["export", "--study", "drafting-eos", "--storage", f"sqlite:///{db}", "--format", "tabbyapi",
                 "--out", str(tmp_path / "tabby")])
    assert code == 1
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x]
    assert line.startswith("StudyError: ") and "draft_model.hybrid_draft_tokens is not in TabbyAPI's schema" in line
    assert not (tmp_path / "tabby").exists()  # no folder, no file, no temporary one


def test_a_refused_export_leaves_the_earlier_export_whole(tmp_path, monkeypatch, capsys):
    """Before: the refused config.yml replaced the earlier one, beside the earlier export's exl3.env."""
    db = tmp_path / "results.db"
    shutil.copy(EXAMPLE, db)
    argv = ["export", "--study", "drafting-eos", "--storage", f"sqlite:///{db}", "--format", "tabbyapi",
            "--out", str(tmp_path / "tabby")]
    assert main(argv) == 0
    before = {p.name: p.read_text() for p in (tmp_path / "tabby").iterdir()}
    _with_a_stray_key(monkeypatch)
    assert main(argv) == 1
    assert {p.name: p.read_text() for p in (tmp_path / "tabby").iterdir()} == before


def test_a_full_champion_export_of_a_subset_no_gate_judged_says_so_in_its_header(tmp_path, capsys):
    """--full-champion writes the confirmed champion's subset, which no gate judged (the minimal champion's passed):
    its header must not borrow the minimal champion's "passed". Before, no test read that line."""
    url, _ = _with_minimization(tmp_path, gate={"passed": True, "reason": "judged as a candidate (fidelity)"})
    assert main(["export", "--study", "drafting-eos", "--storage", url, "--format", "tabbyapi", "--full-champion",
                 "--out", str(tmp_path / "tabby")]) == 0
    header = (tmp_path / "tabby" / "config.yml").read_text().splitlines()[1]
    assert header.startswith("# gate of what TabbyAPI runs (config digest ") and ": NOT JUDGED: " in header
    assert "passed" not in header
    assert "has not passed the gate: NOT JUDGED" in capsys.readouterr().err


def _with_minimization(tmp_path, *, gate: dict | None) -> tuple[str, dict]:
    """The committed study with a minimization of its champion stored, made from scripted launches (test double:
    drafting is worth 25%, the 8K chunk 4%, every other change nothing)."""
    import optuna

    from autoresearch.champion.change_costs import MINIMIZATION_ATTR
    from autoresearch.champion.changes import changes_of
    from autoresearch.champion.crowned import minimized_stamp
    from autoresearch.champion.minimize import Launch, minimize
    from autoresearch.champion.tabbyapi import expressible_subset

    db = tmp_path / "results.db"
    shutil.copy(EXAMPLE, db)
    url = f"sqlite:///{db}"
    study = optuna.load_study(study_name="drafting-eos", storage=url)
    champion = ServingConfig.from_dict(study.user_attrs["champion"]["config"])
    baseline = ServingConfig.from_dict(next(t for t in study.trials if t.user_attrs.get("role") == "baseline")
                                       .user_attrs["config"])
    n = [0]

    def scripted(config, label):
        n[0] += 1
        removed = {c.name for c in changes_of(config, champion)}
        t = (1.25 if "draft_mode" in removed else 1.0) * (1.04 if "max_chunk_size" in removed else 1.0)
        t *= 1 + 0.0002 * (-1) ** n[0]
        return Launch(request_time_s=t, decode_tok_per_s=100 / t, prefill_tok_per_s=1000.0)

    result = minimize(champion, baseline, scripted, launches=2)
    subset = expressible_subset(result.minimal, hybrid=False)
    extra = {"gate": gate} if gate else {}
    cost = {"request": [0.99, 0.98, 1.0], "decode": [0.99, 0.98, 1.0], "prefill": [1.0, 1.0, 1.0], "verdict": "same",
            "launches": 2}
    extra["tabbyapi_subset"] = {"of": "minimal", "digest": subset.digest, "cost": cost}
    stamp = minimized_stamp(study.user_attrs["champion"]["trial"], champion, study.user_attrs["champion"]["round"])
    study.set_user_attr(MINIMIZATION_ATTR, result.to_dict() | {"extra": extra, "minimized": stamp})
    return url, result.to_dict()


def test_export_writes_the_minimal_champion_once_it_passed_the_gate(tmp_path, capsys):
    url, minimization = _with_minimization(tmp_path, gate={"passed": True, "reason": "fidelity within the floor"})
    out = tmp_path / "champion.json"
    assert main(["export", "--study", "drafting-eos", "--storage", url, "--out", str(out)]) == 0
    written = ServingConfig.from_json(out.read_text())
    assert written == ServingConfig.from_dict(minimization["minimal"])
    assert (written.args.draft_mode, written.args.max_chunk_size, written.args.prefill_cooldown) == ("ngram", 8192, 4)
    assert "the minimal champion" in capsys.readouterr().out
    assert main(["export", "--study", "drafting-eos", "--storage", url, "--out", str(out), "--full-champion"]) == 0
    assert ServingConfig.from_json(out.read_text()).args.prefill_cooldown == 3


def test_an_ungated_minimal_champion_is_not_exported_until_its_gate_is_recorded(tmp_path, capsys):
    import optuna

    from autoresearch.champion.minimal_champion import record_gate

    url, _ = _with_minimization(tmp_path, gate=None)
    out = tmp_path / "champion.json"
    assert main(["export", "--study", "drafting-eos", "--storage", url, "--out", str(out)]) == 0
    assert ServingConfig.from_json(out.read_text()).args.prefill_cooldown == 3  # the confirmed champion
    assert "its gate has not been run" in capsys.readouterr().err
    record_gate(optuna.load_study(study_name="drafting-eos", storage=url), passed=False, reason="KL over the limit")
    assert main(["export", "--study", "drafting-eos", "--storage", url, "--out", str(out)]) == 0
    assert "failed the gate: KL over the limit" in capsys.readouterr().err
    record_gate(optuna.load_study(study_name="drafting-eos", storage=url), passed=True, reason="fidelity kept")
    assert main(["export", "--study", "drafting-eos", "--storage", url, "--out", str(out)]) == 0
    assert ServingConfig.from_json(out.read_text()).args.prefill_cooldown == 4  # the minimal champion


def test_tabbyapi_export_of_a_minimized_champion_states_the_measured_costs(tmp_path, capsys):
    url, _ = _with_minimization(tmp_path, gate={"passed": True, "reason": "fidelity within the floor"})
    assert main(["export", "--study", "drafting-eos", "--storage", url, "--format", "tabbyapi", "--full-champion",
                 "--out", str(tmp_path / "tabby")]) == 0
    text = (tmp_path / "tabby" / "NOT-EXPRESSED.md").read_text()
    assert "`prefill_cooldown=3` -> `4` (no key); removing it alone from the champion: request time +0.0%" in text
    # the subset measured belongs to the minimal champion, not to the full one exported here: not claimed
    assert "Its speed has not been measured" in text
    assert main(["export", "--study", "drafting-eos", "--storage", url, "--format", "tabbyapi",
                 "--out", str(tmp_path / "minimal")]) == 0
    assert "TabbyAPI expresses every setting" in (tmp_path / "minimal" / "NOT-EXPRESSED.md").read_text()
