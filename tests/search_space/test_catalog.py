"""The catalog against exllamav3's own source: defaults, every knob's mapping, every condition."""

import ast
import math
import re
from pathlib import Path

import pytest

from search_space.catalog import EXL3_KNOBS, TRANSFORMERS_KNOBS, catalog_for
from search_space.domains import USE_DEFAULT, Categorical
from search_space.errors import CatalogError, SpaceError
from search_space.knobs import EnvVar, ExlArg, Knob, SpaceContext, TransformersArg, knob_is
from search_space.model_info import read_model_info
from search_space.space import build_space
from search_space.surface_check import validate_catalog
from serving.config import ServingConfig
from serving.exl3_surface import installed_surface

GiB = 1024**3


# --- defaults are exllamav3's own ----------------------------------------------------------------

def _source_defaults(relpath: str, class_name: str, method: str) -> dict[str, object]:
    """Keyword defaults of a method in the installed exllamav3, evaluated from the AST."""
    tree = ast.parse((installed_surface().root / relpath).read_text())
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == class_name)
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == method)
    args = fn.args.posonlyargs + fn.args.args
    out = {}
    for arg, node in zip(args[len(args) - len(fn.args.defaults):], fn.args.defaults, strict=True):
        try:
            out[arg.arg] = eval(compile(ast.Expression(node), "<default>", "eval"), {"__builtins__": {}})
        except NameError:
            out[arg.arg] = ast.unparse(node)  # e.g. torch.half
    return out


SOURCE = {
    "Generator": _source_defaults("generator/generator.py", "Generator", "__init__"),
    "Cache": _source_defaults("cache/cache.py", "Cache", "__init__"),
    "Model.load": _source_defaults("model/model.py", "Model", "load_gen"),
    "Model.warmup": _source_defaults("model/model.py", "Model", "warmup"),
}
# The knob default written as exllamav3's source writes the default of the argument it sets.
AS_SOURCE = {"recurrent_dtype": {"half": "torch.half"}, "cache_kind": {"fp16": None}, "draft_mode": {"none": None}}
# Knobs whose argument has no default in exllamav3 (or whose default means "off" and is not in the domain).
NO_EXL3_DEFAULT = {"cache_tokens", "cache_k_bits", "cache_v_bits", "ngram_match_min"}


@pytest.mark.parametrize("knob", [k for k in EXL3_KNOBS if isinstance(k.applied_as, ExlArg)], ids=lambda k: k.name)
def test_argument_knob_defaults_equal_the_installed_exllamav3_source(knob):
    if knob.name in NO_EXL3_DEFAULT:
        callable_name, keyword = knob.applied_as.targets[0]
        assert SOURCE.get(callable_name, {}).get(keyword, "no default") in ("no default", 0)
        return
    expected = AS_SOURCE.get(knob.name, {}).get(knob.default, None if knob.default is USE_DEFAULT else knob.default)
    checked = 0
    for callable_name, keyword in knob.applied_as.targets:
        if keyword in SOURCE.get(callable_name, {}) and keyword not in ("max_history", "draft_cache"):
            assert SOURCE[callable_name][keyword] == expected, f"{callable_name}({keyword})"
            checked += 1
    assert checked, f"no exllamav3 default checked for {knob.name}"


def _env_defaults() -> dict[str, str]:
    """Python-side defaults: os.environ.get("NAME", "v") and util/backend.py _env("NAME", cuda, rocm)."""
    out = {}
    for path in installed_surface().root.rglob("*.py"):
        text = path.read_text(errors="replace")
        for name, value in re.findall(r'os\.environ\.get\(\s*"(EXL3_\w+)",\s*"?(\w+)"?\s*\)', text):
            out[name] = value
        for name, value in re.findall(r'_env\(\s*"(EXL3_\w+)",\s*(\w+),\s*\w+\s*\)', text):
            out[name] = value
    return out


def _cuda_source(relpath: str) -> str:
    return (installed_surface().root / "exllamav3_ext" / relpath).read_text()


def test_environment_knob_defaults_equal_the_installed_exllamav3_source():
    python_side = _env_defaults()
    cpp_side = {
        "EXL3_GEMV": re.search(r'getenv\("EXL3_GEMV"\);\s*if \(!env\) return (\d+);', _cuda_source("quant/exl3_gemv.cu")),
        # on CUDA graphs are disabled only by "0": unset means on
        "EXL3_GRAPHS": re.search(r"#else\s*return e && \*e == '(0)';", _cuda_source("graph.cu")),
    }
    for knob in (k for k in EXL3_KNOBS if isinstance(k.applied_as, EnvVar)):
        name = knob.applied_as.name
        if name == "EXL3_HGEMM_F16ACC":  # unset: a start-up speed test decides ("auto")
            assert knob.default is USE_DEFAULT and knob.applied_as.exl3_default is None
            assert "// Auto: enable where" in _cuda_source("hgemm_f16acc.cu")
            continue
        if name in cpp_side:
            match = cpp_side[name]
            assert match, f"{name}: the pattern in exllamav3's C++ source changed"
            source = "1" if name == "EXL3_GRAPHS" else match.group(1)
        else:
            source = python_side[name]
        assert knob.applied_as.exl3_default == source == str(knob.default), name


def test_the_exllamav3_baseline_is_stock_exllamav3(qwen27b_mtp_dir, dflash_dir):
    context = SpaceContext(engine="exllamav3", model=read_model_info(qwen27b_mtp_dir),
                           draft_model=read_model_info(dflash_dir))
    baseline = build_space(context).baseline_config()
    assert baseline == ServingConfig.from_dict({"engine": "exllamav3"})
    assert baseline.env == {}


def test_the_transformers_baseline_is_the_engines_defaults(tiny_hf_dir):
    space = build_space(SpaceContext(engine="transformers", model=read_model_info(tiny_hf_dir), cpu_count=2))
    assert space.baseline_config() == ServingConfig.from_dict({"engine": "transformers"})


# --- every knob's mapping onto the serving config ------------------------------------------------

@pytest.fixture(scope="module")
def full_space(qwen27b_mtp_dir, dflash_dir):
    """Every exllamav3 knob applies: hybrid EXL3 model with MTP weights, and a DFlash draft given."""
    context = SpaceContext(engine="exllamav3", model=read_model_info(qwen27b_mtp_dir),
                           draft_model=read_model_info(dflash_dir))
    return build_space(context)


def _config(space, **overrides):
    return space.to_config(space.walk(lambda knob, _: overrides.get(knob.name, knob.default)))


EXL3_MAPPINGS = {
    "cache_tokens": ({"cache_tokens": 65536}, {"cache_tokens": 65536}),
    "cache_kind": ({"cache_kind": "quant"}, {"cache_kind": "quant", "cache_k_bits": 8, "cache_v_bits": 8}),
    "cache_k_bits": ({"cache_kind": "quant", "cache_k_bits": 4}, {"cache_k_bits": 4, "cache_v_bits": 8}),
    "cache_v_bits": ({"cache_kind": "quant", "cache_v_bits": 2}, {"cache_k_bits": 8, "cache_v_bits": 2}),
    "cache_slots": ({"cache_slots": 1}, {"cache_slots": 1}),
    "recurrent_dtype": ({"recurrent_dtype": "float"}, {"recurrent_dtype": "float"}),
    "max_batch_size": ({"max_batch_size": 1}, {"max_batch_size": 1}),
    "max_chunk_size": ({"max_chunk_size": 8192}, {"max_chunk_size": 8192}),
    "shared_chunk_size": ({"shared_chunk_size": 0.25, "max_chunk_size": 4096}, {"shared_chunk_size": 1024}),
    "prefill_cooldown": ({"prefill_cooldown": 0}, {"prefill_cooldown": 0}),
    "draft_mode": ({"draft_mode": "mtp"}, {"draft_mode": "mtp", "num_draft_tokens": None, "draft_model_dir": None}),
    "num_draft_tokens": ({"draft_mode": "mtp", "num_draft_tokens": 2}, {"num_draft_tokens": 2, "max_history": 2}),
    "ngram_match_min": ({"draft_mode": "ngram", "ngram_match_min": 3}, {"draft_mode": "ngram", "ngram_match_min": 3}),
    "dynamic_draft_tokens": ({"draft_mode": "mtp", "dynamic_draft_tokens": True}, {"dynamic_draft_tokens": True}),
    "draft_confidence": ({"draft_mode": "mtp", "dynamic_draft_tokens": True, "draft_confidence": 0.6},
                         {"draft_confidence": 0.6}),
    "sparse_draft_head": ({"draft_mode": "dflash", "sparse_draft_head": 8192}, {"sparse_draft_head": 8192}),
    "hybrid_draft_tokens": ({"hybrid_draft_tokens": 8}, {"hybrid_draft_tokens": 8, "max_history": 8}),
    "recurrent_cache_size": ({"recurrent_cache_size": 0}, {"recurrent_cache_size": 0}),
    "recurrent_checkpoint_interval": ({"recurrent_checkpoint_interval": 1024}, {"recurrent_checkpoint_interval": 1024}),
    "recurrent_checkpoint_interval_pp": ({"recurrent_checkpoint_interval_pp": 8192},
                                         {"recurrent_checkpoint_interval_pp": 8192}),
}
ENV_VALUES = {"EXL3_INT8_GEMV": 1, "EXL3_GEMV": 2, "EXL3_HGEMM_F16ACC": 0, "EXL3_NO_FUSED_RECONSTRUCT": 1,
              "EXL3_QKV_SLICE": 0, "EXL3_GRAPHS": 0, "EXL3_BC_ATTN": 0, "EXL3_QC_STAGING": 0, "EXL3_BC_GDN": 0,
              "EXL3_GDN_SUB_CHUNK": 1024, "EXL3_GDN_CONV_TOKEN_MAJOR": 0, "EXL3_GDN_PROJ_FP32": 1}
ENV_ACTIVATION = {"EXL3_QC_STAGING": {"cache_kind": "quant"}}


def test_every_exllamav3_knob_has_a_mapping_test():
    assert set(EXL3_MAPPINGS) | set(ENV_VALUES) == {k.name for k in EXL3_KNOBS}


@pytest.mark.parametrize("name", sorted(EXL3_MAPPINGS))
def test_argument_knob_maps_onto_its_exl3args_field(full_space, name):
    overrides, expected = EXL3_MAPPINGS[name]
    config = _config(full_space, **overrides)
    for field, value in expected.items():
        assert getattr(config.args, field) == value, field
    assert config.env == {}


@pytest.mark.parametrize("name", sorted(ENV_VALUES))
def test_environment_knob_maps_onto_its_variable_and_only_when_it_differs(full_space, name):
    activation = ENV_ACTIVATION.get(name, {})
    config = _config(full_space, **activation, **{name: ENV_VALUES[name]})
    assert config.env == {name: str(ENV_VALUES[name])}
    default_config = _config(full_space, **activation)
    assert default_config.env == {}  # exllamav3's default needs no variable: stock behaviour, same digest


def test_dflash_mode_passes_the_users_draft_model_directory(full_space, dflash_dir):
    config = _config(full_space, draft_mode="dflash")
    assert config.args.draft_mode == "dflash" and config.args.draft_model_dir == str(dflash_dir)


@pytest.mark.parametrize("fraction, chunk, tokens", [(0.25, 2048, 512), (0.25, 512, 256), (1.0, 4096, 4096),
                                                     (USE_DEFAULT, 4096, None)])
def test_shared_chunk_size_is_a_page_multiple_no_larger_than_the_chunk(full_space, fraction, chunk, tokens):
    config = _config(full_space, shared_chunk_size=fraction, max_chunk_size=chunk)
    assert config.args.shared_chunk_size == tokens


TRANSFORMERS_MAPPINGS = {"dtype": "bfloat16", "attn_implementation": "eager", "prefill_chunk_size": 128,
                         "threads": 2, "max_batch_size": 1}


def test_every_transformers_knob_maps_onto_its_field(tiny_hf_dir):
    assert set(TRANSFORMERS_MAPPINGS) == {k.name for k in TRANSFORMERS_KNOBS}
    space = build_space(SpaceContext(engine="transformers", model=read_model_info(tiny_hf_dir), cpu_count=2))
    for name, value in TRANSFORMERS_MAPPINGS.items():
        config = _config(space, **{name: value})
        assert getattr(config.args, name) == value and config.engine == "transformers"


# --- conditions -------------------------------------------------------------------------------------

def _space(model_dir, engine="exllamav3", draft_dir=None, cpu_count=2, **kwargs):
    draft = read_model_info(draft_dir) if draft_dir else None
    context = SpaceContext(engine=engine, model=read_model_info(model_dir), draft_model=draft, cpu_count=cpu_count)
    return build_space(context, **kwargs)


def test_draft_tokens_are_active_only_with_a_speculative_mode(full_space):
    num_draft = full_space.knob("num_draft_tokens")
    for mode in ("ngram", "mtp", "dflash", "draft_model"):
        assert num_draft.is_active(full_space.context, {"draft_mode": mode})
    assert not num_draft.is_active(full_space.context, {"draft_mode": "none"})
    assert "num_draft_tokens" not in full_space.baseline_values()


def test_mtp_is_offered_only_when_the_checkpoint_has_mtp_weights(qwen27b_dir, qwen27b_mtp_dir):
    assert "mtp" not in _space(qwen27b_dir).knob("draft_mode").domain.choices
    assert "mtp" in _space(qwen27b_mtp_dir).knob("draft_mode").domain.choices


def test_dflash_is_offered_only_when_the_user_gives_a_draft_model(qwen27b_mtp_dir, dflash_dir):
    assert "dflash" not in _space(qwen27b_mtp_dir).knob("draft_mode").domain.choices
    assert "dflash" in _space(qwen27b_mtp_dir, draft_dir=dflash_dir).knob("draft_mode").domain.choices


def test_a_draft_model_of_another_vocabulary_is_refused(qwen27b_dir, tiny_exl3_dir, tiny_hf_dir, dflash_dir):
    with pytest.raises(SpaceError, match="vocab_size 512, the model 248320"):
        _space(qwen27b_dir, draft_dir=tiny_exl3_dir)
    with pytest.raises(SpaceError, match="only to the exllamav3 engine"):
        _space(tiny_hf_dir, engine="transformers", draft_dir=dflash_dir)


def test_draft_model_knobs_vanish_when_no_draft_model_can_be_used(qwen27b_dir):
    names = {k.name for k in _space(qwen27b_dir).knobs}
    assert {"num_draft_tokens", "ngram_match_min", "hybrid_draft_tokens"} <= names  # n-gram still possible
    assert not names & {"dynamic_draft_tokens", "draft_confidence", "sparse_draft_head"}


def test_recurrent_state_knobs_apply_only_to_hybrid_models(dense_exl3_dir, qwen27b_dir):
    recurrent = {"cache_slots", "recurrent_dtype", "recurrent_cache_size", "recurrent_checkpoint_interval",
                 "recurrent_checkpoint_interval_pp", "EXL3_BC_GDN", "EXL3_GDN_SUB_CHUNK",
                 "EXL3_GDN_CONV_TOKEN_MAJOR", "EXL3_GDN_PROJ_FP32"}
    assert not recurrent & {k.name for k in _space(dense_exl3_dir).knobs}
    assert recurrent <= {k.name for k in _space(qwen27b_dir).knobs}


def test_weight_kernel_variables_apply_only_to_exl3_checkpoints(tiny_hf_dir, tiny_exl3_dir):
    weight_kernels = {"EXL3_INT8_GEMV", "EXL3_GEMV", "EXL3_HGEMM_F16ACC", "EXL3_NO_FUSED_RECONSTRUCT", "EXL3_QKV_SLICE"}
    assert not weight_kernels & {k.name for k in _space(tiny_hf_dir).knobs}
    assert weight_kernels <= {k.name for k in _space(tiny_exl3_dir).knobs}


def test_quant_cache_knobs_are_active_only_with_a_quantized_cache(full_space):
    for name in ("cache_k_bits", "cache_v_bits", "EXL3_QC_STAGING"):
        knob = full_space.knob(name)
        assert knob.is_active(full_space.context, {"cache_kind": "quant"})
        assert not knob.is_active(full_space.context, {"cache_kind": "fp16"})


def test_draft_confidence_is_active_only_with_dynamic_drafts(full_space):
    knob = full_space.knob("draft_confidence")
    assert knob.is_active(full_space.context, {"draft_mode": "mtp", "dynamic_draft_tokens": True})
    assert not knob.is_active(full_space.context, {"draft_mode": "mtp", "dynamic_draft_tokens": False})
    assert not knob.is_active(full_space.context, {"draft_mode": "none"})


def test_cache_sizes_beyond_the_models_context_are_not_offered(tiny_exl3_dir, qwen27b_dir):
    assert max(_space(tiny_exl3_dir).knob("cache_tokens").domain.choices) == 32768
    assert max(_space(qwen27b_dir).knob("cache_tokens").domain.choices) == 262144


def test_thread_counts_beyond_the_hosts_cores_are_not_offered(tiny_hf_dir):
    assert _space(tiny_hf_dir, engine="transformers", cpu_count=2).knob("threads").domain.choices == (0, 1, 2)
    assert 16 in _space(tiny_hf_dir, engine="transformers", cpu_count=16).knob("threads").domain.choices


# --- space size and pinning ----------------------------------------------------------------------

def test_transformers_space_size_is_the_product_of_its_domains(tiny_hf_dir):
    space = _space(tiny_hf_dir, engine="transformers", cpu_count=2)
    assert space.size() == 3 * 2 * 5 * 3 * 4


def test_exllamav3_space_size_counts_each_conditional_branch_once(qwen27b_dir):
    space = _space(qwen27b_dir)
    unconditional = [k for k in space.knobs if not k.depends_on and k.name not in ("cache_kind", "draft_mode")]
    product = math.prod(k.domain.size for k in unconditional)
    cache_branches = 1 + 7 * 7 * 2  # fp16 | quant x k_bits x v_bits x EXL3_QC_STAGING
    draft_branches = 1 + 16 * 8  # none | ngram x num_draft_tokens x ngram_match_min (no MTP, no DFlash here)
    assert space.size() == product * cache_branches * draft_branches


def test_pinned_knobs_are_fixed_in_the_baseline_and_leave_the_search(qwen27b_dir):
    space = _space(qwen27b_dir, pinned={"cache_tokens": 65536})
    assert space.baseline_config().args.cache_tokens == 65536
    assert "cache_tokens" not in {k.name for k in space.searched}
    assert space.size() * 6 == _space(qwen27b_dir).size()


@pytest.mark.parametrize(
    "pinned, message",
    [({"no_such_knob": 1}, "unknown knob"), ({"cache_tokens": 1000}, "domain"),
     ({"EXL3_GRAPHS": True}, "domain")],
)
def test_bad_pins_are_refused_naming_the_knob(qwen27b_dir, pinned, message):
    with pytest.raises(SpaceError, match=message):
        _space(qwen27b_dir, pinned=pinned)


def test_pinning_a_knob_that_does_not_apply_to_the_model_says_why(dense_exl3_dir):
    with pytest.raises(SpaceError, match="Gated DeltaNet"):
        _space(dense_exl3_dir, pinned={"cache_slots": 1})


# --- catalog invariants --------------------------------------------------------------------------

def _knob(name, **kwargs):
    base = dict(domain=Categorical((0, 1)), default=0, applied_as=ExlArg("max_batch_size", (("Generator", "x"),)),
                may_change_outputs=False)
    return Knob(name=name, **{**base, **kwargs})


@pytest.mark.parametrize(
    "knobs, message",
    [((_knob("a"), _knob("a")), "twice"),
     ((_knob("child", applies_when=(knob_is("parent", 1),)), _knob("parent")), "must come earlier"),
     ((_knob("a", choice_requires=((7, knob_is("x", 1)),)),), "not in its domain"),
     ((_knob("a", applied_as=ExlArg("no_such_field", (("Generator", "x"),))),), "Exl3Args.no_such_field"),
     ((_knob("a", applied_as=TransformersArg("no_such_field")),), "TransformersArgs.no_such_field")],
)
def test_inconsistent_catalogs_are_refused_naming_the_knob(knobs, message):
    with pytest.raises(CatalogError, match=message):
        validate_catalog(knobs)


def test_the_shipped_catalogs_are_consistent():
    validate_catalog(EXL3_KNOBS)
    validate_catalog(TRANSFORMERS_KNOBS)
    assert catalog_for("transformers") is TRANSFORMERS_KNOBS
    with pytest.raises(ValueError, match="no knob catalog"):
        catalog_for("llama.cpp")


def test_issue_required_knobs_are_all_in_the_catalog():
    names = {k.name for k in EXL3_KNOBS}
    required = {"cache_kind", "cache_k_bits", "cache_v_bits", "cache_tokens", "max_chunk_size", "shared_chunk_size",
                "prefill_cooldown", "max_batch_size", "draft_mode", "num_draft_tokens", "dynamic_draft_tokens",
                "draft_confidence", "sparse_draft_head", "hybrid_draft_tokens", "recurrent_dtype",
                "recurrent_cache_size", "recurrent_checkpoint_interval", "EXL3_INT8_GEMV", "EXL3_QC_STAGING",
                "EXL3_GRAPHS", "EXL3_BC_ATTN", "EXL3_BC_GDN", "EXL3_GDN_SUB_CHUNK", "EXL3_HGEMM_F16ACC"}
    assert required <= names
    assert Path(installed_surface().root).name == "exllamav3"
