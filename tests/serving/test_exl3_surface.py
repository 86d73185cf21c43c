import shutil

import pytest

from serving.config import Exl3Args
from serving.errors import SurfaceMismatch
from serving.exl3_surface import installed_surface, read_surface
from serving.exllamav3_engine import Exl3Engine


def test_installed_exllamav3_takes_every_keyword_we_pass(tiny_model_dir):
    from serving.textcodec import TextCodec

    args = Exl3Args(cache_kind="quant", cache_k_bits=4, cache_v_bits=4, draft_mode="mtp", num_draft_tokens=3,
                    sparse_draft_head=8192, hybrid_draft_tokens=8)
    engine = Exl3Engine(tiny_model_dir, args, TextCodec(tiny_model_dir),
                        env={"EXL3_INT8_GEMV": "1", "EXL3_QC_STAGING": "1"})
    engine.check_surface()  # reads the installed source; never imports exllamav3


def test_surface_lists_knobs_and_env_vars():
    surface = installed_surface()
    assert {"max_chunk_size", "prefill_cooldown", "num_draft_tokens"} <= surface.params["Generator"]
    assert {"max_num_tokens", "max_history", "recurrent_dtype"} <= surface.params["Cache"]
    assert {"EXL3_INT8_GEMV", "EXL3_GRAPHS", "EXL3_GDN_SUB_CHUNK"} <= surface.env_vars


def test_a_renamed_argument_is_a_surface_mismatch(tmp_path):
    root = installed_surface().root
    copy = tmp_path / "exllamav3"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("*.so", "__pycache__", "exllamav3_ext"))
    path = copy / "generator" / "generator.py"
    path.write_text(path.read_text().replace("prefill_cooldown", "prefill_cool_down"))
    surface = read_surface(copy, version="patched")
    with pytest.raises(SurfaceMismatch, match="has no argument 'prefill_cooldown'"):
        surface.require("Generator", ["max_chunk_size", "prefill_cooldown"])
    with pytest.raises(SurfaceMismatch, match="EXL3_NO_SUCH_KNOB"):
        surface.require_env(["EXL3_NO_SUCH_KNOB"])


def test_unknown_env_var_is_refused_before_loading(tiny_model_dir):
    from serving.textcodec import TextCodec

    engine = Exl3Engine(tiny_model_dir, Exl3Args(), TextCodec(tiny_model_dir), env={"EXL3_NO_SUCH_KNOB": "1"})
    with pytest.raises(SurfaceMismatch, match="never reads"):
        engine.check_surface()
