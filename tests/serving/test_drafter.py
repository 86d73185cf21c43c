"""A user's draft checkpoint: `--draft-model` picks the drafting mode exllamav3 gives its architecture,
and a drafter of another vocabulary is refused before anything loads."""

import json
import shutil

import pytest

from serving.__main__ import build_parser, prepare
from serving.config import ServingConfig
from serving.drafter import check_same_vocabulary, read_drafter
from serving.errors import ConfigError, ConfigRejected
from serving.launcher import LaunchSpec, free_port, launch


def _copy(model_dir, dest, **config_changes):
    shutil.copytree(model_dir, dest)
    config = json.loads((dest / "config.json").read_text())
    (dest / "config.json").write_text(json.dumps({**config, **config_changes}))
    return dest


@pytest.fixture(scope="module")
def twin_dir(tiny_model_dir, tmp_path_factory):
    """The tiny model itself as a drafter: an ordinary causal LM with exactly the target's vocabulary."""
    return _copy(tiny_model_dir, tmp_path_factory.mktemp("drafters") / "twin")


def _prepare(tmp_path, model_dir, config: dict, *extra):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return prepare(build_parser().parse_args(["--model", str(model_dir), "--config", str(path), *extra]))


def test_draft_model_flag_picks_the_autoregressive_mode_for_a_causal_lm(tiny_model_dir, twin_dir, tmp_path):
    state = _prepare(tmp_path, tiny_model_dir, {"engine": "exllamav3"}, "--draft-model", str(twin_dir))
    assert state.config.args.draft_mode == "draft_model"
    assert state.config.args.draft_model_dir == str(twin_dir)
    assert read_drafter(twin_dir).architecture == "Qwen3_5ForCausalLM"


def test_draft_model_flag_picks_dflash_for_a_dflash_drafter(tiny_model_dir, tmp_path):
    dflash = _copy(tiny_model_dir, tmp_path / "dflash", architectures=["DFlashDraftModel"])
    state = _prepare(tmp_path, tiny_model_dir, {"engine": "exllamav3"}, "--draft-model", str(dflash))
    assert state.config.args.draft_mode == "dflash"


@pytest.mark.parametrize("config, message", [
    ({"engine": "exllamav3", "args": {"draft_mode": "ngram", "ngram_match_min": 2}},
     "config sets draft_mode 'ngram'"),
    ({"engine": "exllamav3", "args": {"draft_mode": "dflash", "draft_model_dir": "/elsewhere"}},
     "draft_mode 'draft_model'.*config sets draft_mode 'dflash'"),
    ({"engine": "transformers"}, "applies to the exllamav3 engine"),
])
def test_draft_model_flag_that_contradicts_the_config_is_refused(tiny_model_dir, twin_dir, tmp_path, config, message):
    with pytest.raises(ConfigError, match=message):
        _prepare(tmp_path, tiny_model_dir, config, "--draft-model", str(twin_dir))


def test_a_config_whose_mode_does_not_match_the_checkpoint_is_refused(tiny_model_dir, twin_dir, tmp_path):
    config = {"engine": "exllamav3", "args": {"draft_mode": "dflash", "draft_model_dir": str(twin_dir)}}
    with pytest.raises(ConfigError, match="exllamav3 drafts with as draft_mode 'draft_model'"):
        _prepare(tmp_path, tiny_model_dir, config)


def test_a_drafter_of_another_vocabulary_is_refused(tiny_model_dir, tmp_path):
    wide = _copy(tiny_model_dir, tmp_path / "wide", vocab_size=2048)
    with pytest.raises(ConfigError, match="vocab_size 2048, the model 1024"):
        check_same_vocabulary(tiny_model_dir, read_drafter(wide))
    retokenized = _copy(tiny_model_dir, tmp_path / "retokenized")
    tok = json.loads((retokenized / "tokenizer.json").read_text())
    first = next(iter(tok["model"]["vocab"]))
    tok["model"]["vocab"][first + "x"] = tok["model"]["vocab"].pop(first)
    (retokenized / "tokenizer.json").write_text(json.dumps(tok))
    with pytest.raises(ConfigError, match="another tokenizer"):
        check_same_vocabulary(tiny_model_dir, read_drafter(retokenized))


def test_unknown_draft_architecture_is_refused(tiny_model_dir, tmp_path):
    odd = _copy(tiny_model_dir, tmp_path / "odd", architectures=["NoSuchModel"])
    with pytest.raises(ConfigError, match="does not know the architecture 'NoSuchModel'"):
        read_drafter(odd)


@pytest.mark.slow
def test_the_server_refuses_a_mismatched_drafter_with_a_config_error(tiny_model_dir, tmp_path):
    wide = _copy(tiny_model_dir, tmp_path / "wide", vocab_size=2048)
    config = ServingConfig.from_dict({"engine": "exllamav3", "args": {"draft_mode": "draft_model",
                                                                      "draft_model_dir": str(wide)}})
    spec = LaunchSpec(model_dir=tiny_model_dir, config=config, port=free_port(), log_path=tmp_path / "server.log",
                      startup_timeout_s=120)
    with pytest.raises(ConfigRejected, match="vocab_size 2048") as info:
        launch(spec)
    assert info.value.exit_code == 2
