import json

import pytest

from serving.config import Exl3Args, ServingConfig
from serving.errors import ConfigError


def test_defaults_fill_in_and_digest_is_stable():
    a = ServingConfig.from_dict({"engine": "exllamav3"})
    b = ServingConfig.from_json(json.dumps({"engine": "exllamav3", "args": {"max_chunk_size": 2048}}))
    assert a.args == Exl3Args()
    assert a.digest == b.digest
    assert ServingConfig.from_dict(a.to_dict()) == a


def test_env_integers_become_strings_and_change_the_digest():
    a = ServingConfig.from_dict({"engine": "exllamav3", "env": {"EXL3_INT8_GEMV": 0}})
    assert a.env == {"EXL3_INT8_GEMV": "0"}
    assert a.digest != ServingConfig.from_dict({"engine": "exllamav3"}).digest


@pytest.mark.parametrize(
    "data, message",
    [
        ({"engine": "exllamav3", "args": {"max_chunk": 4096}}, "unknown key 'max_chunk'"),
        ({"engine": "exllamav3", "bogus": 1}, "unknown key 'bogus' in serving config"),
        ({"engine": "exllamav3", "args": {"max_chunk_size": "4096"}}, "must be an integer"),
        ({"engine": "exllamav3", "args": {"max_chunk_size": 4096.0}}, "must be an integer"),
        ({"engine": "exllamav3", "args": {"dynamic_draft_tokens": 1}}, "must be true or false"),
        ({"engine": "exllamav3", "args": {"max_chunk_size": 1000}}, "multiple of 256"),
        ({"engine": "exllamav3", "args": {"cache_kind": "quant"}}, "cache_k_bits must be an integer 2..8"),
        ({"engine": "exllamav3", "args": {"cache_kind": "quant", "cache_k_bits": 9, "cache_v_bits": 4}}, "2..8"),
        ({"engine": "exllamav3", "args": {"cache_k_bits": 4}}, "only with cache_kind 'quant'"),
        ({"engine": "exllamav3", "args": {"recurrent_dtype": "bf16"}}, "one of 'half', 'float'"),
        ({"engine": "exllamav3", "args": {"draft_mode": "dflash"}}, "draft_model_dir is required"),
        ({"engine": "exllamav3", "args": {"draft_mode": "draft_model"}}, "draft_model_dir is required"),
        ({"engine": "exllamav3", "args": {"draft_mode": "mtp", "draft_model_dir": "/d"}},
         "allowed only with 'dflash' or 'draft_model'"),
        ({"engine": "exllamav3", "args": {"draft_mode": "draft_model", "draft_model_dir": ""}}, "non-empty"),
        ({"engine": "exllamav3", "args": {"draft_mode": "draft_model", "draft_model_dir": "/d",
                                          "sparse_draft_head": 4096}}, "drafts with its own head"),
        ({"engine": "exllamav3", "args": {"draft_mode": "model"}}, "one of 'none', 'mtp', 'ngram', 'dflash'"),
        ({"engine": "exllamav3", "args": {"draft_mode": "ngram"}}, "ngram_match_min >= 1"),
        ({"engine": "exllamav3", "args": {"num_draft_tokens": 4}}, "only with a draft_mode"),
        ({"engine": "exllamav3", "args": {"sparse_draft_head": 8192, "draft_mode": "ngram", "ngram_match_min": 2}},
         "sparse_draft_head applies only"),
        ({"engine": "exllamav3", "args": {"shared_chunk_size": 4096}}, "exceeds max_chunk_size"),
        ({"engine": "exllamav3", "env": {"OMP_NUM_THREADS": "4"}}, "not an EXL3_"),
        ({"engine": "transformers", "env": {"EXL3_GRAPHS": "0"}}, "only the exllamav3 engine"),
        ({"engine": "vllm"}, "engine must be one of"),
        ({"engine": "transformers", "args": {"dtype": "int4"}}, "one of 'float32'"),
        ([1, 2], "must be a JSON object"),
    ],
)
def test_bad_configs_name_the_key(data, message):
    with pytest.raises(ConfigError, match=message):
        ServingConfig.from_dict(data)


def test_invalid_json_is_a_config_error():
    with pytest.raises(ConfigError, match="not valid JSON"):
        ServingConfig.from_json("{")


def test_max_history_covers_drafted_tokens():
    assert Exl3Args().max_history == 0
    assert Exl3Args(draft_mode="mtp").max_history == 4
    assert Exl3Args(draft_mode="mtp", num_draft_tokens=3, hybrid_draft_tokens=8).max_history == 8


def test_engine_defaults_to_the_given_default():
    assert ServingConfig.from_dict({}, default_engine_name="transformers").engine == "transformers"
