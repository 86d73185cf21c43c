"""The Optuna bridge, with FixedTrial and with real in-memory studies."""

import optuna
import pytest
from optuna.trial import FixedTrial

from search_space.domains import USE_DEFAULT
from search_space.errors import SpaceError
from search_space.knobs import SpaceContext
from search_space.model_info import read_model_info
from search_space.sampling import (
    baseline_params,
    config_from_params,
    distributions,
    sample_config,
    sample_values,
)
from search_space.space import build_space
from serving.config import ServingConfig


@pytest.fixture(scope="module")
def space(qwen27b_mtp_dir, dflash_dir):
    context = SpaceContext(engine="exllamav3", model=read_model_info(qwen27b_mtp_dir),
                           draft_model=read_model_info(dflash_dir))
    return build_space(context)


def test_the_baseline_params_sample_the_baseline_config(space):
    params = baseline_params(space)
    assert params["draft_mode"] == "none" and params["shared_chunk_size"] == "default"
    assert "num_draft_tokens" not in params and "cache_k_bits" not in params  # inactive in the baseline
    assert sample_config(FixedTrial(params), space) == space.baseline_config()


def test_a_fixed_speculative_trial_maps_to_its_config(space):
    params = {**baseline_params(space), "draft_mode": "mtp", "num_draft_tokens": 3, "dynamic_draft_tokens": True,
              "draft_confidence": 0.55, "sparse_draft_head": 16384, "cache_kind": "quant", "cache_k_bits": 8,
              "cache_v_bits": 4, "EXL3_QC_STAGING": 0, "EXL3_INT8_GEMV": 1, "max_chunk_size": 4096}
    config = sample_config(FixedTrial(params), space)
    args = config.args
    assert (args.draft_mode, args.num_draft_tokens, args.dynamic_draft_tokens) == ("mtp", 3, True)
    assert args.draft_confidence == pytest.approx(0.55) and args.sparse_draft_head == 16384
    assert (args.cache_kind, args.cache_k_bits, args.cache_v_bits, args.max_chunk_size) == ("quant", 8, 4, 4096)
    assert config.env == {"EXL3_QC_STAGING": "0", "EXL3_INT8_GEMV": "1"}
    assert args.max_history == 3


def test_children_of_an_inactive_branch_are_never_suggested(space):
    params = {**baseline_params(space), "num_draft_tokens": 7, "cache_k_bits": 3}
    values = sample_values(FixedTrial(params), space)
    assert "num_draft_tokens" not in values and "cache_k_bits" not in values


def test_config_from_params_rebuilds_a_trial_and_refuses_stray_or_missing_params(space):
    params = {**baseline_params(space), "draft_mode": "ngram", "num_draft_tokens": 5, "ngram_match_min": 2}
    assert config_from_params(space, params).args.ngram_match_min == 2
    with pytest.raises(SpaceError, match="lack 'ngram_match_min'"):
        config_from_params(space, {k: v for k, v in params.items() if k != "ngram_match_min"})
    with pytest.raises(SpaceError, match="'cache_k_bits' is not an active knob"):
        config_from_params(space, {**params, "cache_k_bits": 4})
    with pytest.raises(SpaceError, match="outside"):
        config_from_params(space, {**params, "num_draft_tokens": 99})


def test_the_baseline_lies_inside_the_distributions_optuna_stores(space):
    params = baseline_params(space)
    trial = optuna.trial.create_trial(params=params, distributions=distributions(space, params), value=1.0)
    assert trial.params["shared_chunk_size"] == "default"
    assert set(distributions(space)) == {k.name for k in space.knobs}


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_a_grouped_tpe_study_starts_from_the_baseline_and_samples_only_valid_configs(space):
    sampler = optuna.samplers.TPESampler(multivariate=True, group=True, seed=3, n_startup_trials=8)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.enqueue_trial(baseline_params(space), user_attrs={"role": "baseline"}, skip_if_exists=True)
    study.enqueue_trial(baseline_params(space), user_attrs={"role": "baseline"}, skip_if_exists=True)
    configs: dict[int, ServingConfig] = {}

    def objective(trial):
        config = sample_config(trial, space)
        configs[trial.number] = config
        return config.args.max_chunk_size / 1024 + (config.args.draft_mode != "none")

    study.optimize(objective, n_trials=24)
    assert configs[0] == space.baseline_config() and study.trials[0].user_attrs == {"role": "baseline"}
    assert len({c.digest for c in configs.values()}) > 12
    for trial in study.trials:
        assert config_from_params(space, trial.params) == configs[trial.number]
        speculative = trial.params["draft_mode"] != "none"
        assert ("num_draft_tokens" in trial.params) == speculative
        assert ("cache_k_bits" in trial.params) == (trial.params["cache_kind"] == "quant")


def test_a_random_study_reaches_every_draft_mode_and_the_default_sentinel(space):
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = []
    study.optimize(lambda t: seen.append(sample_values(t, space)) or 0.0, n_trials=60)
    assert {v["draft_mode"] for v in seen} == {"none", "ngram", "mtp", "dflash"}
    assert any(v["recurrent_checkpoint_interval"] is USE_DEFAULT for v in seen)
    for values in seen:
        space.to_config(values)  # every sampled combination is a valid serving config


def test_the_cpu_engine_space_samples_transformers_configs(tiny_hf_dir):
    space = build_space(SpaceContext(engine="transformers", model=read_model_info(tiny_hf_dir), cpu_count=2))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    configs = []
    study.optimize(lambda t: configs.append(sample_config(t, space)) or 0.0, n_trials=15)
    assert {c.engine for c in configs} == {"transformers"}
    assert len({c.digest for c in configs}) > 10
    assert all(c.args.threads in (0, 1, 2) for c in configs)


def test_the_embedded_default_model_searches_a_real_cpu_space(tiny_model_dir):
    """The project's generated tiny model (real transformers safetensors) on the transformers engine."""
    info = read_model_info(tiny_model_dir)
    assert info.is_hybrid and not info.is_exl3 and info.num_attention_layers == 1
    embedding = info.tensors["model.embed_tokens.weight"]
    assert embedding.shape == (1024, 512) and info.weight_bytes("embedding") == embedding.nbytes
    space = build_space(SpaceContext(engine="transformers", model=info, cpu_count=2))
    assert space.size() == 360
    assert sample_config(FixedTrial(baseline_params(space)), space) == ServingConfig.from_dict({"engine": "transformers"})
