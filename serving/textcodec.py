"""Text <-> token ids with the model folder's tokenizer.json, shared by both engines.

One tokenizer implementation for both engines keeps prompt token ids identical whichever engine
serves them, which the fidelity gate relies on when it compares configurations.
"""

from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path

from tokenizers import Tokenizer

from serving.errors import ConfigError

__all__ = ["IncrementalDecoder", "TextCodec"]


def _byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's bytes_to_unicode: byte-level token characters back to bytes."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=True)}


class TextCodec:
    """Encode prompts, decode outputs, and name single tokens for logprobs."""

    def __init__(self, model_dir: Path):
        path = Path(model_dir) / "tokenizer.json"
        if not path.exists():
            raise ConfigError(f"no tokenizer.json in model folder {model_dir}")
        self.tokenizer = Tokenizer.from_file(str(path))
        self._added = {t.content for t in self.tokenizer.get_added_tokens_decoder().values()}
        self._special_ids = {
            i for i, t in self.tokenizer.get_added_tokens_decoder().items() if t.special
        }
        self.eos_token_ids = self._read_eos_ids(Path(model_dir))

    def _read_eos_ids(self, model_dir: Path) -> tuple[int, ...]:
        ids: list[int] = []
        for name in ("generation_config.json", "config.json"):
            path = model_dir / name
            if path.exists():
                value = json.loads(path.read_text()).get("eos_token_id")
                if value is None and name == "config.json":
                    value = json.loads(path.read_text()).get("text_config", {}).get("eos_token_id")
                if isinstance(value, int):
                    value = [value]
                for v in value or []:
                    if v not in ids:
                        ids.append(v)
        im_end = self.tokenizer.token_to_id("<|im_end|>")
        if im_end is not None and im_end not in ids:
            ids.append(im_end)
        return tuple(ids)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        """Special tokens written in the text (ChatML markers) become their ids; no BOS is added."""
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int], *, skip_special: bool = True) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special)

    def is_special(self, token_id: int) -> bool:
        return token_id in self._special_ids

    def token_text(self, token_id: int) -> str:
        """The token as text, for logprob listings (may hold a partial UTF-8 character)."""
        return self.token_bytes(token_id).decode("utf-8", errors="replace")

    def token_bytes(self, token_id: int) -> bytes:
        piece = self.tokenizer.id_to_token(token_id)
        if piece is None:
            return b""
        if piece in self._added:
            return piece.encode()
        table = self._bytes_table
        if all(ch in table for ch in piece):
            return bytes(table[ch] for ch in piece)
        return self.tokenizer.decode([token_id], skip_special_tokens=False).encode()

    @cached_property
    def _bytes_table(self) -> dict[str, int]:
        return _byte_decoder()


class IncrementalDecoder:
    """Turns a growing list of token ids into text deltas without splitting UTF-8 characters.

    Decodes only a short window (vLLM's prefix/read offsets), so streaming stays linear in length.
    """

    def __init__(self, codec: TextCodec):
        self.codec = codec
        self.ids: list[int] = []
        self._prefix_offset = 0
        self._read_offset = 0

    def push(self, token_id: int) -> str:
        self.ids.append(token_id)
        prefix_text = self.codec.decode(self.ids[self._prefix_offset:self._read_offset])
        new_text = self.codec.decode(self.ids[self._prefix_offset:])
        if len(new_text) <= len(prefix_text) or new_text.endswith("\ufffd"):
            return ""  # an incomplete character, or a token with no text: wait
        self._prefix_offset = self._read_offset
        self._read_offset = len(self.ids)
        return new_text[len(prefix_text):]
