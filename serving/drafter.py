"""A user-given draft checkpoint: which drafting mode it serves, and whether it shares the target's vocabulary.

The kind is exllamav3's own: its architecture table (read from the installed source by
serving.exl3_surface, never imported) says whether the checkpoint's architecture is a DFlash
drafter, an attached MTP-style assistant, or an ordinary causal LM that drafts autoregressively.
exllamav3 checks none of this: its Generator takes any Model as `draft_model` and feeds token ids
from one model's table to the other's, so a mismatched vocabulary would index out of range or
draft nonsense. This module refuses such a pair before anything loads.

Usage:
    drafter = read_drafter(Path("models/qwen3.5-0.8b-exl3"))
    drafter.draft_mode                      # "draft_model" (autoregressive) or "dflash"
    check_same_vocabulary(target_dir, drafter)   # ConfigError naming the difference
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from serving.errors import ConfigError, SurfaceMismatch
from serving.exl3_surface import Exl3Surface, installed_surface

__all__ = ["Drafter", "DraftKind", "check_draft_tokens", "check_same_vocabulary", "draft_kind", "read_drafter",
           "vocab_size"]

DraftKind = Literal["dflash", "draft_model"]


@dataclass(frozen=True, slots=True)
class Drafter:
    """A draft checkpoint the user gave, classified."""

    directory: Path
    architecture: str
    kind: DraftKind
    block_size: int | None = None  # a DFlash drafter's block: one pass drafts block_size - 1 tokens

    @property
    def draft_mode(self) -> DraftKind:
        """The Exl3Args.draft_mode that uses this checkpoint (the kinds are named as the modes)."""
        return self.kind


def draft_kind(architecture: str, surface: Exl3Surface | None = None) -> DraftKind:
    """The drafting mode a checkpoint of `architecture` serves, by exllamav3's own architecture table.

    Raises:
        ConfigError: exllamav3 does not know the architecture, or it is an attached assistant
            (MTP-style heads such as Gemma4Assistant) that this project does not drive.
    """
    surface = surface or installed_surface()
    try:
        info = surface.architecture(architecture)
    except SurfaceMismatch as exc:
        raise ConfigError(f"draft model: {exc}") from exc
    if info.is_dflash_drafter:
        return "dflash"
    if info.is_attached_drafter:
        raise ConfigError(
            f"draft model architecture {architecture!r} is an attached assistant in exllamav3 {surface.version} "
            f"(caps: {', '.join(sorted(info.caps))}); only DFlash drafters and ordinary causal LMs are supported "
            f"as --draft-model (a checkpoint's own MTP head is draft_mode 'mtp', no --draft-model)")
    return "draft_model"


def read_drafter(directory: Path, surface: Exl3Surface | None = None) -> Drafter:
    """Classify a draft checkpoint from its config.json.

    Raises:
        ConfigError: the folder has no readable config.json with one architecture, or see draft_kind.
    """
    directory = Path(directory)
    config = _read_config(directory)
    architectures = config.get("architectures")
    if not isinstance(architectures, list) or len(architectures) != 1 or not isinstance(architectures[0], str):
        raise ConfigError(f"draft model {directory}/config.json must name exactly one architecture, "
                          f"got {architectures!r}")
    kind = draft_kind(architectures[0], surface)
    block = config.get("block_size", (config.get("dflash_config") or {}).get("block_size"))  # as DFlashConfig reads it
    return Drafter(directory=directory, architecture=architectures[0], kind=kind,
                   block_size=block if kind == "dflash" and isinstance(block, int) else None)


def check_draft_tokens(drafter: Drafter, num_draft_tokens: int | None) -> None:
    """Refuse more draft tokens than a DFlash drafter's one pass makes (block_size - 1): exllamav3 copies
    num_draft_tokens columns of its block (generator.py iterate_draftmodel_dflash_gen) and fails the round.

    Raises:
        ConfigError: naming both numbers.
    """
    if drafter.block_size and num_draft_tokens and num_draft_tokens > drafter.block_size - 1:
        raise ConfigError(f"num_draft_tokens {num_draft_tokens} exceeds what the DFlash drafter {drafter.directory} "
                          f"drafts per pass (block_size {drafter.block_size} - 1 = {drafter.block_size - 1})")


def vocab_size(config: dict[str, Any]) -> int | None:
    """vocab_size at the top level or in text_config, where exllamav3's Config reads it."""
    value = config.get("vocab_size")
    if value is None and isinstance(config.get("text_config"), dict):
        value = config["text_config"].get("vocab_size")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def check_same_vocabulary(target_dir: Path, drafter: Drafter) -> None:
    """Refuse a drafter whose token ids do not mean what the target's mean.

    Both embedding tables must have the same number of rows (config vocab_size): exllamav3 feeds
    drafted ids to the target and accepted ids to the drafter without a range check, so a padded
    table of another size can be indexed out of range. An autoregressive drafter samples from its own
    head, so its tokenizer must also map every token to the target's id (tokenizer.json: the model's
    vocabulary and the added tokens). A DFlash drafter borrows the target's embedding and head and
    has no tokenizer of its own.

    Raises:
        ConfigError: naming the first difference, or a file that is needed and missing.
    """
    target_dir = Path(target_dir)
    target_vocab = vocab_size(_read_config(target_dir))
    draft_vocab = vocab_size(_read_config(drafter.directory))
    if target_vocab is None or draft_vocab is None:
        missing = target_dir if target_vocab is None else drafter.directory
        raise ConfigError(f"{missing}/config.json has no integer vocab_size; cannot check the draft model's vocabulary")
    if target_vocab != draft_vocab:
        raise ConfigError(
            f"draft model {drafter.directory} has vocab_size {draft_vocab}, the model {target_vocab}: a drafter "
            f"must share the target's vocabulary (same tokenizer, same embedding rows); exllamav3 does not "
            f"range-check token ids passed between the two")
    if drafter.kind != "draft_model":
        return
    target_tokens = _tokenizer_ids(target_dir)
    draft_tokens = _tokenizer_ids(drafter.directory)
    if target_tokens != draft_tokens:
        differ = sorted(set(target_tokens.items()) ^ set(draft_tokens.items()), key=lambda kv: kv[1])
        token, token_id = differ[0]
        raise ConfigError(
            f"draft model {drafter.directory} has another tokenizer than {target_dir}: token {token!r} "
            f"(id {token_id}) is in one tokenizer.json and not at that id in the other "
            f"({len(differ)} differences); an autoregressive drafter must use the target's tokenizer")


def _read_json(path: Path, purpose: str = "") -> dict[str, Any]:
    """A JSON object from a checkpoint file, or a ConfigError that names the file (and why it was read)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}{purpose}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} is not a JSON object")
    return data


def _read_config(directory: Path) -> dict[str, Any]:
    return _read_json(directory / "config.json")


def _tokenizer_ids(directory: Path) -> dict[str, int]:
    """token -> id from tokenizer.json: the model's vocabulary (BPE, WordPiece or Unigram) and added tokens."""
    path = directory / "tokenizer.json"
    data = _read_json(path, " to compare the draft model's tokenizer with the model's")
    model = data.get("model") or {}
    vocab = model.get("vocab")
    if isinstance(vocab, dict):
        ids = {str(token): int(i) for token, i in vocab.items()}
    elif isinstance(vocab, list):  # Unigram: [[piece, score], ...] in id order
        ids = {str(entry[0]): i for i, entry in enumerate(vocab)}
    else:
        raise ConfigError(f"{path} has no model.vocab to compare")
    for token in data.get("added_tokens") or ():
        ids[str(token["content"])] = int(token["id"])
    return ids
