"""A serving config as TabbyAPI expresses it: a config.yml tree, an EXL3_* environment, and what it cannot say.

TabbyAPI (theroyallab/tabbyAPI main @e632af4, `common/config_models.py`) reads its model settings from config.yml
and passes EXL3_* variables through the process environment untouched; its load API takes no draft
settings, so an export is a config.yml plus an environment file. Its schema is pydantic with extra
keys ignored: a key it does not know is dropped without a word, which is why only keys its schema
declares are written here (autoresearch.champion.tabbyapi_schema checks them, and export checks the file it wrote).
Every setting is written out even where it equals exllamav3's default, because TabbyAPI's defaults
are not exllamav3's (max_batch_size, output_chunking, max_seq_len, the CUDA allocator).

Usage:
    export = to_tabbyapi(config, model_path=Path("/models/q27"), hybrid=True)
    export.config, export.env, export.unexpressed, export.equivalent
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from serving.config import Exl3Args, ServingConfig

__all__ = ["MIB", "TabbyExport", "Unexpressed", "expressible_subset", "to_tabbyapi"]

MIB = 1024**2
_SYMMETRIC = {4: "Q4", 6: "Q6", 8: "Q8"}
_DRAFT_MODE = {"none": "disabled", "ngram": "ngram", "mtp": "mtp", "dflash": "model", "draft_model": "model"}
_DEFAULT = Exl3Args()


@dataclass(frozen=True)
class Unexpressed:
    """One setting of the config that TabbyAPI has no key for, and what TabbyAPI runs instead."""

    field: str
    value: Any
    tabby_runs: Any  # the value TabbyAPI uses in its place (exllamav3's default, or what it ties it to)
    why: str


@dataclass(frozen=True)
class TabbyExport:
    config: dict[str, dict[str, Any]]  # config.yml: section -> key -> value
    env: dict[str, str]  # exl3.env: EXL3_* variables
    unexpressed: tuple[Unexpressed, ...]

    @property
    def equivalent(self) -> bool:
        """TabbyAPI runs exactly this configuration (nothing is left out)."""
        return not self.unexpressed


def _cache_mode(args: Exl3Args) -> str:
    if args.cache_kind == "fp16":
        return "FP16"
    if args.cache_k_bits == args.cache_v_bits and args.cache_k_bits in _SYMMETRIC:
        return _SYMMETRIC[args.cache_k_bits]
    return f"{args.cache_k_bits},{args.cache_v_bits}"


def _unexpressed(args: Exl3Args, *, hybrid: bool) -> list[Unexpressed]:
    """The fields whose value TabbyAPI cannot set (it runs exllamav3's default, or a tied value)."""
    out = []

    def differs(name: str, why: str) -> None:
        if getattr(args, name) != getattr(_DEFAULT, name):
            out.append(Unexpressed(name, getattr(args, name), getattr(_DEFAULT, name), why))

    differs("hybrid_draft_tokens", "no key; its Cache(max_history) is tied to draft_num_tokens")
    differs("shared_chunk_size", "no key; exllamav3 takes half of chunk_size")
    differs("prefill_cooldown", "no key")
    differs("draft_confidence", "no key")
    differs("sparse_draft_head", "no key")
    differs("recurrent_dtype", "no key; the recurrent state stays half")
    differs("recurrent_checkpoint_interval", "no key")
    differs("recurrent_checkpoint_interval_pp", "no key")
    if args.draft_mode == "none":  # Tabby's dynamic_draft applies to its draft_mode; suffix drafting alone has none
        differs("dynamic_draft_tokens", "draft_model.dynamic_draft applies only with a draft_mode")
    if args.recurrent_cache_size % MIB:
        out.append(Unexpressed("recurrent_cache_size", args.recurrent_cache_size, args.recurrent_cache_size // MIB * MIB,
                               "memory.sysmem_recurrent_cache is whole MB"))
    if hybrid and args.cache_slots > args.max_batch_size:  # fewer slots clamp the batch, which Tabby can say
        out.append(Unexpressed("cache_slots", args.cache_slots, args.max_batch_size,
                               "TabbyAPI sizes the recurrent-state slots to max_batch_size"))
    return out


def to_tabbyapi(config: ServingConfig, *, model_path: Path, hybrid: bool) -> TabbyExport:
    """TabbyAPI's config.yml tree and environment for `config`; `hybrid`: the model has recurrent state.

    Raises:
        ValueError: the config is not an exllamav3 one (TabbyAPI serves exllamav3 and exllamav2 only).
    """
    if config.engine != "exllamav3":
        raise ValueError(f"TabbyAPI serves exllamav3 checkpoints; this config is for the {config.engine} engine")
    a: Exl3Args = config.args
    # on a hybrid model exllamav3 clamps the generator's batch to the cache's slots; TabbyAPI sets both to one value
    batch = min(a.max_batch_size, a.cache_slots) if hybrid else a.max_batch_size
    model = {
        "model_dir": str(model_path.parent), "model_name": model_path.name, "backend": "exllamav3",
        "max_seq_len": -1,  # the model's own, clamped by TabbyAPI to cache_size (as our server's context)
        "cache_size": a.cache_tokens, "cache_mode": _cache_mode(a), "chunk_size": a.max_chunk_size,
        "output_chunking": False,  # on, TabbyAPI caps each job's tokens per pass at chunk_size; our server does not
        "max_batch_size": batch,
    }
    draft: dict[str, Any] = {"draft_mode": _DRAFT_MODE[a.draft_mode]}
    if a.draft_model_dir is not None:
        draft |= {"draft_model_dir": str(Path(a.draft_model_dir).parent), "draft_model_name": Path(a.draft_model_dir).name,
                  "draft_cache_mode": "FP16"}  # our server's draft cache is fp16
    if a.draft_mode == "ngram":
        draft["ngram_match_min"] = a.ngram_match_min
    if a.num_draft_tokens is not None:
        draft["draft_num_tokens"] = a.num_draft_tokens
    if a.dynamic_draft_tokens and a.draft_mode != "none":  # TabbyAPI's default (off) is exllamav3's
        draft["dynamic_draft"] = True
    memory = {"sysmem_recurrent_cache": a.recurrent_cache_size // MIB,
              "cuda_malloc_async": False}  # on, it overrides the allocator exllamav3 and our server run with
    unexpressed = _unexpressed(a, hybrid=hybrid)
    return TabbyExport(config={"model": model, "draft_model": draft, "memory": memory}, env=dict(sorted(config.env.items())),
                       unexpressed=tuple(unexpressed))


def expressible_subset(config: ServingConfig, *, hybrid: bool) -> ServingConfig:
    """What TabbyAPI runs when given `config`: every setting it cannot express at the value it uses instead.

    Raises:
        serving.errors.ConfigError: the result breaks a rule of the serving config.
    """
    if config.engine != "exllamav3":
        raise ValueError(f"TabbyAPI serves exllamav3 checkpoints; this config is for the {config.engine} engine")
    runs = {u.field: u.tabby_runs for u in _unexpressed(config.args, hybrid=hybrid)}
    return ServingConfig.from_dict({**config.to_dict(), "args": {**config.to_dict()["args"], **runs}})
