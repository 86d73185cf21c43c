"""The exllamav3 engine on a GPU: a converted tiny Qwen3_5 and the shape-true 27B under a 24 GiB cap.

Skipped without CUDA. On a GPU machine (docs/gpu-records.md, "GPU tests"):
    EXL3_TINY_MODEL=/tmp/tiny-exl3 EXL3_27B_MODEL=/tmp/q27 python -m pytest -m gpu tests/serving/test_gpu.py
Without the variables the fixtures make the models themselves (conversion about 60 s, 27B about 30 s).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

GIB = 1024**3


@pytest.fixture(scope="session")
def exl3_tiny_dir(tmp_path_factory, tiny_model_dir):
    if os.environ.get("EXL3_TINY_MODEL"):
        return Path(os.environ["EXL3_TINY_MODEL"])
    from serving.synthetic.tiny import prepare_for_exl3

    root = tmp_path_factory.mktemp("tiny-exl3")
    prepare_for_exl3(tiny_model_dir, root / "in")
    subprocess.run([sys.executable, "-m", "exllamav3.conversion.convert_model", "-i", str(root / "in"), "-o",
                    str(root / "out"), "-w", str(root / "work"), "-b", "4.0", "-hb", "6", "-cr", "16", "-cc", "256"],
                   check=True)
    for name in ("chat_template.jinja", "tokenizer_config.json", "generation_config.json"):
        if not (root / "out" / name).exists():
            (root / "out" / name).write_bytes((tiny_model_dir / name).read_bytes())
    return root / "out"


@pytest.fixture(scope="session")
def exl3_27b_dir(tmp_path_factory):
    if os.environ.get("EXL3_27B_MODEL"):
        return Path(os.environ["EXL3_27B_MODEL"])
    from serving.synthetic.exl3 import QWEN38_27B, write_exl3_checkpoint

    return write_exl3_checkpoint(tmp_path_factory.mktemp("q27") / "q27", QWEN38_27B, bits=4.0, head_bits=6)


def _serve(model_dir, tmp_path, args=None, env=None, vram_limit=None):
    from serving.config import ServingConfig
    from serving.errors import LaunchError
    from serving.launcher import LaunchSpec, free_port, launch

    config = ServingConfig.from_dict({"engine": "exllamav3", "args": args or {}, "env": env or {}})
    try:
        return launch(LaunchSpec(model_dir=model_dir, config=config, port=free_port(), log_path=tmp_path / "gpu.log",
                                 vram_limit_bytes=vram_limit, startup_timeout_s=900))
    except LaunchError as exc:
        print(exc.log_tail[-6000:])
        raise


def _exercise(url, *, expect_cache_hit=True, sharp=True):
    """Health, streaming chat with usage timings, completions with logprobs and teacher forcing."""
    assert httpx.get(url + "/health").json() == {"status": "ok"}
    body = {"messages": [{"role": "user", "content": "What is 2 + 3?"}], "temperature": 0, "max_tokens": 16,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=300) as r:
        lines = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    usage = json.loads(lines[-2])["usage"]
    assert usage["completion_tokens"] == 16
    assert usage["timings"]["prefill_s"] > 0 and usage["timings"]["decode_s"] > 0
    prompt = "The quick brown fox jumps over the lazy dog. " * 40
    gen = httpx.post(url + "/v1/completions", timeout=300, json={
        "prompt": prompt, "max_tokens": 8, "temperature": 0, "ignore_eos": True, "logprobs": 3,
        "return_tokens_as_token_ids": True}).json()
    gen_ids = [int(t.split(":")[1]) for t in gen["choices"][0]["logprobs"]["tokens"]]
    assert len(gen_ids) == 8
    if expect_cache_hit:
        again = httpx.post(url + "/v1/completions", timeout=300, json={"prompt": prompt, "max_tokens": 1}).json()
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    echo = httpx.post(url + "/v1/completions", timeout=300, json={
        "prompt": prompt, "max_tokens": 0, "echo": True, "logprobs": 0, "return_tokens_as_token_ids": True}).json()
    prompt_ids = [int(t.split(":")[1]) for t in echo["choices"][0]["logprobs"]["tokens"]]
    scored = httpx.post(url + "/v1/completions", timeout=300, json={
        "prompt": prompt_ids + gen_ids, "max_tokens": 0, "echo": True, "logprobs": 3,
        "score_decode_from": len(prompt_ids), "return_tokens_as_token_ids": True}).json()
    lp = scored["choices"][0]["logprobs"]
    teacher = lp["token_logprobs"][len(prompt_ids):]
    assert len(teacher) == 8 and all(x is not None and x <= 0 for x in teacher)
    forced = lp["tokens"][len(prompt_ids):]
    tops = lp["top_logprobs"][len(prompt_ids):]
    print("teacher-forced logprobs", teacher, "top-3", tops)
    for value, top in zip(teacher, tops, strict=True):
        assert max(top.values()) >= value - 1e-3  # nothing beats the top-1
    if sharp:  # a model with confident logits: the greedy continuation is top-1 when teacher-forced
        assert sum(max(top, key=top.get) == t for top, t in zip(tops, forced, strict=True)) >= 7
    return httpx.get(url + "/v1/server_info").json()


def test_tiny_exl3_default_config(exl3_tiny_dir, tmp_path):
    with _serve(exl3_tiny_dir, tmp_path) as server:
        info = _exercise(server.url)
    assert info["engine"] == "exllamav3" and info["vram_peak_bytes"] > 0


def test_tiny_exl3_quantized_cache_and_kernel_variant(exl3_tiny_dir, tmp_path):
    args = {"cache_kind": "quant", "cache_k_bits": 4, "cache_v_bits": 4, "max_chunk_size": 4096, "cache_slots": 2}
    with _serve(exl3_tiny_dir, tmp_path, args=args, env={"EXL3_INT8_GEMV": "0"}) as server:
        info = _exercise(server.url)
    assert info["config"]["args"]["cache_k_bits"] == 4 and info["env"] == {"EXL3_INT8_GEMV": "0"}


def test_shape_true_27b_under_a_24_gib_cap(exl3_27b_dir, tmp_path):
    args = {"cache_tokens": 32768, "cache_slots": 1}
    with _serve(exl3_27b_dir, tmp_path, args=args, vram_limit=24 * GIB) as server:
        # random codes through 64 layers give near-flat logits: greedy near-ties flip between kernels
        info = _exercise(server.url, sharp=False)
    assert info["vram_limit_bytes"] == 24 * GIB
    assert 12 * GIB < info["vram_peak_bytes"] < 24 * GIB
