"""A tiny random Qwen3_5 text model in Hugging Face format, deterministic by seed.

It loads in the transformers engine in seconds, so CI and the embedded default run a real server
on it. Its dimensions are multiples of 128 so exllamav3's converter accepts it on a GPU machine
(see `prepare_for_exl3`). Its outputs are noise; its shapes, tokenizer and template are real.
"""

from __future__ import annotations

import json
import shutil
from importlib import resources
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

__all__ = ["SPECIAL_TOKENS", "TINY_DIMENSIONS", "build_tokenizer", "prepare_for_exl3", "write_chat_files", "write_tiny_model"]

VOCAB_SIZE = 1024
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
THINK_TOKENS = ["<think>", "</think>"]  # added, not special: they decode as text, as in Qwen
TINY_DIMENSIONS = dict(
    vocab_size=VOCAB_SIZE,
    hidden_size=512,
    intermediate_size=1536,
    num_hidden_layers=4,  # 3 Gated DeltaNet + 1 full attention, Qwen3.5's pattern
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=128,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    linear_conv_kernel_dim=4,
    max_position_embeddings=32768,
    tie_word_embeddings=False,
)


def build_tokenizer() -> Tokenizer:
    """Byte-level BPE trained on the bundled corpus: deterministic, offline, ChatML specials."""
    corpus = resources.files("serving.synthetic").joinpath("corpus.txt").read_text()
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(SPECIAL_TOKENS) - len(THINK_TOKENS),
        min_frequency=1,
        special_tokens=[],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus.splitlines(keepends=True), trainer=trainer)
    tok.add_special_tokens(SPECIAL_TOKENS)
    tok.add_tokens(THINK_TOKENS)
    return tok


def write_tiny_model(out_dir: Path, *, seed: int = 0) -> Path:
    """Write config, weights (safetensors), tokenizer and chat template to `out_dir`."""
    import torch
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    out_dir.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer()
    if tok.get_vocab_size() > VOCAB_SIZE:
        raise RuntimeError(f"tokenizer has {tok.get_vocab_size()} tokens, more than {VOCAB_SIZE}")
    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    config = Qwen3_5TextConfig(
        **TINY_DIMENSIONS,
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = Qwen3_5ForCausalLM(config).eval()
    with torch.no_grad():  # random init has tiny logits; widen them so greedy choices are not near-ties
        model.lm_head.weight.mul_(8.0)
    model.save_pretrained(out_dir, safe_serialization=True)

    tok.save(str(out_dir / "tokenizer.json"))
    write_chat_files(out_dir, {t: tok.token_to_id(t) for t in SPECIAL_TOKENS + THINK_TOKENS},
                     max_len=TINY_DIMENSIONS["max_position_embeddings"])
    (out_dir / "SYNTHETIC.json").write_text(json.dumps({"kind": "tiny", "seed": seed}, indent=2))
    return out_dir


def write_chat_files(out_dir: Path, ids: dict[str, int], *, max_len: int) -> None:
    """chat_template.jinja, tokenizer_config.json and generation_config.json for ChatML token ids."""
    template = resources.files("serving.synthetic").joinpath("chat_template.jinja").read_text()
    (out_dir / "chat_template.jinja").write_text(template)
    added = {
        str(ids[t]): {"content": t, "special": t in SPECIAL_TOKENS, "normalized": False,
                      "lstrip": False, "rstrip": False, "single_word": False}
        for t in SPECIAL_TOKENS + THINK_TOKENS
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": added,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "bos_token": None,
        "add_bos_token": False,
        "model_max_length": max_len,
        "chat_template": template,
    }, indent=2))
    (out_dir / "generation_config.json").write_text(json.dumps({
        "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
        "pad_token_id": ids["<|endoftext|>"],
        "do_sample": False,
    }, indent=2))


def prepare_for_exl3(hf_dir: Path, out_dir: Path) -> Path:
    """Copy a tiny model into the layout exllamav3's converter reads (`model.language_model.*`).

    transformers saves Qwen3_5ForCausalLM weights under `model.*`; exllamav3 reads them under
    `model.language_model.*`. Then, on a GPU machine:
        python -m exllamav3.conversion.convert_model -i OUT -o EXL3 -w WORK -b 4.0 -hb 6 -cr 16 -cc 256
    """
    import torch
    from safetensors.torch import load_file, save_file

    out_dir.mkdir(parents=True, exist_ok=True)
    for path in hf_dir.iterdir():
        if path.suffix == ".safetensors":
            tensors = load_file(path)
            renamed = {  # bf16, as real checkpoints are: the converter's kernels require it
                ("model.language_model." + k[len("model."):] if k.startswith("model.") else k): v.to(torch.bfloat16)
                for k, v in tensors.items()
            }
            save_file(renamed, out_dir / path.name, metadata={"format": "pt"})
        elif path.name == "config.json":
            config = json.loads(path.read_text())
            config["dtype"] = "bfloat16"
            (out_dir / path.name).write_text(json.dumps(config, indent=2))
        elif path.is_file():
            shutil.copy2(path, out_dir / path.name)
    return out_dir
