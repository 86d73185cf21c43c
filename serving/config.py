"""The serving configuration: what search_space produces and `python -m serving --config` reads.

Parsed once at the edge into frozen, typed objects. Unknown or ill-typed keys are errors that name
the key and the allowed values, because exllamav3 silently ignores keyword arguments it does not
know and a typo would otherwise measure the default under another name.

Usage:
    config = ServingConfig.from_json(Path("candidate.json").read_text())
    config.digest        # stable sha256 of the canonical JSON; names logs and results rows
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import types
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from serving.errors import ConfigError

__all__ = [
    "DRAFT_CHECKPOINT_MODES",
    "ENGINES",
    "Exl3Args",
    "ServingConfig",
    "TransformersArgs",
    "engine_for_checkpoint",
]

ENGINES = ("exllamav3", "transformers")
PAGE_TOKENS = 256  # exllamav3's cache page: cache sizes and chunk sizes are multiples of it
DRAFT_CHECKPOINT_MODES = ("dflash", "draft_model")  # draft modes that load the user's draft checkpoint
_ENV_NAME = re.compile(r"^(EXL3|EXLLAMA|EXLLAMAV3)_[A-Z0-9_]+$")


@dataclass(frozen=True, kw_only=True, slots=True)
class Exl3Args:
    """Arguments of the exllamav3 engine. Defaults are exllamav3 1.6.5's own, except where it has none.

    `cache_tokens` has no exllamav3 default (Cache requires it); 32768 is this project's choice.
    `None` means "exllamav3 decides" where exllamav3 itself takes None (shared_chunk_size,
    num_draft_tokens, recurrent_checkpoint_interval).
    """

    cache_tokens: int = 32768  # Cache(max_num_tokens)
    cache_kind: Literal["fp16", "quant"] = "fp16"  # Cache(layer_type=CacheLayer_fp16 | CacheLayer_quant)
    cache_k_bits: int | None = None  # CacheLayer_quant k_bits, 2..8, only with cache_kind == "quant"
    cache_v_bits: int | None = None  # CacheLayer_quant v_bits, 2..8
    cache_slots: int = 16  # Cache(max_batch_size): recurrent-state slots of a hybrid model
    recurrent_dtype: Literal["half", "float"] = "half"  # Cache(recurrent_dtype)
    max_batch_size: int = 256  # Generator(max_batch_size)
    max_chunk_size: int = 2048  # Generator(max_chunk_size), also load() and warmup()
    shared_chunk_size: int | None = None  # Generator(shared_chunk_size)
    prefill_cooldown: int = 4  # Generator(prefill_cooldown)
    recurrent_cache_size: int = 4 * 1024**3  # Generator(recurrent_cache_size), bytes of host RAM
    recurrent_checkpoint_interval: int | None = None  # Generator(recurrent_checkpoint_interval)
    recurrent_checkpoint_interval_pp: int = 32768  # Generator(recurrent_checkpoint_interval_pp)
    # mtp: the checkpoint's own MTP head; dflash / draft_model: a user-given DFlash drafter / small causal LM
    draft_mode: Literal["none", "mtp", "ngram", "dflash", "draft_model"] = "none"
    draft_model_dir: str | None = None  # the user's draft checkpoint, exactly with draft_mode dflash or draft_model
    num_draft_tokens: int | None = None  # Generator(num_draft_tokens); None: the drafter's default
    dynamic_draft_tokens: bool = False  # Generator(dynamic_draft_tokens)
    draft_confidence: float = 0.4  # Generator(draft_confidence)
    sparse_draft_head: int = 0  # Generator(sparse_draft_head), MTP and DFlash only
    ngram_match_min: int = 0  # Generator(ngram_match_min); >= 1 exactly when draft_mode == "ngram"
    hybrid_draft_tokens: int = 0  # Generator(hybrid_draft_tokens), on top of any mode

    def __post_init__(self) -> None:
        _positive(self, "cache_tokens", "cache_slots", "max_batch_size", "max_chunk_size")
        _multiple_of_page(self, "cache_tokens", "max_chunk_size")
        if self.shared_chunk_size is not None:
            _positive(self, "shared_chunk_size")
            _multiple_of_page(self, "shared_chunk_size")
            if self.shared_chunk_size > self.max_chunk_size:
                raise ConfigError(
                    f"shared_chunk_size {self.shared_chunk_size} exceeds max_chunk_size {self.max_chunk_size}"
                )
        if self.prefill_cooldown < 0:
            raise ConfigError(f"prefill_cooldown must be >= 0, got {self.prefill_cooldown}")
        if self.cache_kind == "quant":
            for name in ("cache_k_bits", "cache_v_bits"):
                bits = getattr(self, name)
                if bits is None or not 2 <= bits <= 8:
                    raise ConfigError(f"{name} must be an integer 2..8 with cache_kind 'quant', got {bits!r}")
        elif self.cache_k_bits is not None or self.cache_v_bits is not None:
            raise ConfigError("cache_k_bits/cache_v_bits apply only with cache_kind 'quant'")
        if self.recurrent_cache_size < 0:
            raise ConfigError(f"recurrent_cache_size must be >= 0 bytes, got {self.recurrent_cache_size}")
        for name in ("recurrent_checkpoint_interval", "recurrent_checkpoint_interval_pp"):
            value = getattr(self, name)
            if value is not None:
                _positive(self, name)
                _multiple_of_page(self, name)
        self._check_drafting()

    def _check_drafting(self) -> None:
        """Each drafting field applies only with the modes exllamav3 reads it in."""
        if (self.draft_mode in DRAFT_CHECKPOINT_MODES) != (self.draft_model_dir is not None):
            raise ConfigError(f"draft_model_dir is required with draft_mode {self.draft_mode!r} and allowed only "
                              f"with 'dflash' or 'draft_model' (got draft_mode {self.draft_mode!r}, "
                              f"draft_model_dir {self.draft_model_dir!r})")
        if self.draft_model_dir is not None and not self.draft_model_dir:
            raise ConfigError("draft_model_dir must be a non-empty path")
        if (self.draft_mode == "ngram") != (self.ngram_match_min >= 1):
            raise ConfigError("ngram_match_min >= 1 is required with draft_mode 'ngram' and allowed only then")
        speculative = self.draft_mode != "none" or self.hybrid_draft_tokens > 0
        if self.num_draft_tokens is not None:
            if self.draft_mode == "none":
                raise ConfigError("num_draft_tokens applies only with a draft_mode other than 'none'")
            if not 1 <= self.num_draft_tokens <= 16:
                raise ConfigError(f"num_draft_tokens must be 1..16, got {self.num_draft_tokens}")
        if not speculative and (self.dynamic_draft_tokens or self.draft_confidence != 0.4):
            raise ConfigError("dynamic_draft_tokens/draft_confidence apply only with speculative decoding")
        if not 0.0 < self.draft_confidence < 1.0:
            raise ConfigError(f"draft_confidence must be in (0, 1), got {self.draft_confidence}")
        if self.sparse_draft_head and self.draft_mode not in ("mtp", "dflash"):
            raise ConfigError("sparse_draft_head applies only with draft_mode 'mtp' or 'dflash' "
                              "(an autoregressive draft_model drafts with its own head)")
        if self.sparse_draft_head < 0 or self.hybrid_draft_tokens < 0:
            raise ConfigError("sparse_draft_head and hybrid_draft_tokens must be >= 0")

    @property
    def max_history(self) -> int:
        """Cache(max_history): exllamav3 raises unless it covers every drafted token."""
        drafted = self.num_draft_tokens or (4 if self.draft_mode != "none" else 0)
        if self.draft_mode == "dflash" and self.num_draft_tokens is None:
            drafted = 16  # DFlash drafts block_size - 1 tokens (typically 15); leave room
        return max(drafted, self.hybrid_draft_tokens)


@dataclass(frozen=True, kw_only=True, slots=True)
class TransformersArgs:
    """Arguments of the CPU reference engine (transformers), the embedded default and CI's engine."""

    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    attn_implementation: Literal["sdpa", "eager"] = "sdpa"
    prefill_chunk_size: int = 0  # tokens per prefill forward; 0 = the whole prompt at once
    threads: int = 0  # torch intra-op threads; 0 = torch's default
    max_batch_size: int = 4  # jobs active at once; the rest wait in the queue
    context_tokens: int = 0  # longest prompt + output; 0 = the model's max_position_embeddings
    # Prompt-lookup (n-gram) drafting, as exllamav3's ngram mode: the continuation of the longest suffix
    # match (at least ngram_match_min tokens) in the job's own context, verified in one forward
    draft_mode: Literal["none", "ngram"] = "none"
    num_draft_tokens: int | None = None  # tokens drafted per step; None: 4, exllamav3's n-gram default
    ngram_match_min: int = 0  # >= 1 exactly when draft_mode == "ngram"

    def __post_init__(self) -> None:
        for name in ("prefill_chunk_size", "threads", "context_tokens"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)}")
        _positive(self, "max_batch_size")
        if (self.draft_mode == "ngram") != (self.ngram_match_min >= 1):
            raise ConfigError("ngram_match_min >= 1 is required with draft_mode 'ngram' and allowed only then")
        if self.num_draft_tokens is not None:
            if self.draft_mode == "none":
                raise ConfigError("num_draft_tokens applies only with draft_mode 'ngram'")
            if not 1 <= self.num_draft_tokens <= 16:
                raise ConfigError(f"num_draft_tokens must be 1..16, got {self.num_draft_tokens}")

    @property
    def draft_tokens(self) -> int:
        """Tokens drafted per step: 0 without drafting."""
        if self.draft_mode == "none":
            return 0
        return self.num_draft_tokens or 4


_ARGS_BY_ENGINE: dict[str, type] = {"exllamav3": Exl3Args, "transformers": TransformersArgs}


@dataclass(frozen=True, kw_only=True, slots=True)
class ServingConfig:
    """One candidate configuration: the engine, its typed arguments, and EXL3_* variables.

    The env variables are applied by `python -m serving` before exllamav3 is imported, which is why
    every configuration runs in a fresh process.
    """

    engine: Literal["exllamav3", "transformers"]
    args: Exl3Args | TransformersArgs
    env: dict[str, str] = field(default_factory=dict)
    served_model_name: str | None = None

    def __post_init__(self) -> None:
        expected = _ARGS_BY_ENGINE[self.engine]
        if not isinstance(self.args, expected):
            raise ConfigError(f"engine {self.engine!r} takes {expected.__name__}, got {type(self.args).__name__}")
        for name, value in self.env.items():
            if self.engine != "exllamav3":
                raise ConfigError(f"env variable {name!r} given, but only the exllamav3 engine reads env variables")
            if not _ENV_NAME.match(name):
                raise ConfigError(f"env variable {name!r} is not an EXL3_*/EXLLAMA_* name")
            if not isinstance(value, str):
                raise ConfigError(f"env variable {name!r} must be a string, got {type(value).__name__}")

    @classmethod
    def from_dict(cls, data: Any, *, default_engine_name: str | None = None) -> ServingConfig:
        """Build from parsed JSON; the engine defaults to `default_engine_name` when absent."""
        if not isinstance(data, dict):
            raise ConfigError(f"serving config must be a JSON object, got {type(data).__name__}")
        _reject_unknown("serving config", data, ("engine", "args", "env", "served_model_name"))
        engine = data.get("engine", default_engine_name)
        if engine not in ENGINES:
            raise ConfigError(f"engine must be one of {', '.join(ENGINES)}; got {engine!r}")
        args = _build_args(engine, data.get("args", {}))
        env = data.get("env", {})
        if not isinstance(env, dict):
            raise ConfigError(f"env must be an object of NAME: value, got {type(env).__name__}")
        env = {name: _env_value(name, value) for name, value in env.items()}
        name = data.get("served_model_name")
        if name is not None and (not isinstance(name, str) or not name):
            raise ConfigError("served_model_name must be a non-empty string")
        return cls(engine=engine, args=args, env=env, served_model_name=name)

    @classmethod
    def from_json(cls, text: str, *, default_engine_name: str | None = None) -> ServingConfig:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"serving config is not valid JSON: {exc}") from exc
        return cls.from_dict(data, default_engine_name=default_engine_name)

    def to_dict(self) -> dict[str, Any]:
        """Canonical form: every argument present, defaults filled in."""
        out: dict[str, Any] = {
            "engine": self.engine,
            "args": {f.name: getattr(self.args, f.name) for f in fields(self.args)},
            "env": dict(sorted(self.env.items())),
        }
        if self.served_model_name is not None:
            out["served_model_name"] = self.served_model_name
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @property
    def digest(self) -> str:
        canonical = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    def with_args(self, **changes: Any) -> ServingConfig:
        return dataclasses.replace(self, args=dataclasses.replace(self.args, **changes))


def quantization_config(model_dir: Path, config: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint's quantization_config: in config.json, its text_config, or quantization_config.json.

    Raises:
        OSError, ValueError: quantization_config.json exists but cannot be read as JSON.
    """
    qcfg = config.get("quantization_config")
    if qcfg is None and isinstance(config.get("text_config"), dict):
        qcfg = config["text_config"].get("quantization_config")
    path = Path(model_dir) / "quantization_config.json"
    if qcfg is None and path.is_file():
        qcfg = json.loads(path.read_text())
    return qcfg if isinstance(qcfg, dict) else {}


def engine_for_checkpoint(model_dir: Path) -> str:
    """The engine that can load this checkpoint: exllamav3 for EXL3, the transformers engine otherwise.

    The checkpoint decides, not the machine: an EXL3 folder on a machine without CUDA still means
    exllamav3 (which then says it needs a GPU), never a CPU engine that cannot read its weights.
    """
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text())
        method = quantization_config(model_dir, config).get("quant_method") if isinstance(config, dict) else None
    except (OSError, ValueError):
        method = None  # not a readable model folder: the engine's own loader says why
    return "exllamav3" if method == "exl3" else "transformers"


def _build_args(engine: str, data: Any) -> Any:
    cls = _ARGS_BY_ENGINE[engine]
    if not isinstance(data, dict):
        raise ConfigError(f"args must be a JSON object, got {type(data).__name__}")
    known = {f.name: f for f in fields(cls)}
    _reject_unknown(f"args of engine {engine!r}", data, tuple(known))
    hints = typing.get_type_hints(cls)
    values = {name: _check_type(f"args.{name}", value, hints[name]) for name, value in data.items()}
    return cls(**values)


def _check_union(key: str, value: Any, options: tuple) -> Any:
    """The first option of `X | Y | None` that the value satisfies, or every option's complaint."""
    if value is None and type(None) in options:
        return None
    errors = []
    for option in options:
        if option is type(None):
            continue
        try:
            return _check_type(key, value, option)
        except ConfigError as exc:
            errors.append(str(exc))
    raise ConfigError(errors[0] if len(errors) == 1 else f"{key}: " + "; ".join(errors))


def _check_type(key: str, value: Any, hint: Any) -> Any:
    """Strict JSON type check: no bool for int, no float for int, no str for numbers."""
    origin = typing.get_origin(hint)
    if origin is Literal:
        allowed = typing.get_args(hint)
        if value not in allowed or isinstance(value, bool) != isinstance(allowed[0], bool):
            raise ConfigError(f"{key} must be one of {', '.join(map(repr, allowed))}; got {value!r}")
        return value
    if origin in (typing.Union, types.UnionType):
        return _check_union(key, value, typing.get_args(hint))
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key} must be true or false; got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key} must be an integer; got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{key} must be a number; got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key} must be a string; got {value!r}")
        return value
    raise TypeError(f"unsupported type hint {hint!r} for {key}")  # a programming error


def _env_value(name: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ConfigError(f"env variable {name!r} must be a string or an integer; got {value!r}")
    return str(value)


def _reject_unknown(where: str, data: dict, allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise ConfigError(
            f"unknown key {unknown[0]!r} in {where}; expected one of: {', '.join(sorted(allowed))}"
        )


def _positive(obj: Any, *names: str) -> None:
    for name in names:
        if getattr(obj, name) <= 0:
            raise ConfigError(f"{name} must be > 0, got {getattr(obj, name)}")


def _multiple_of_page(obj: Any, *names: str) -> None:
    for name in names:
        if getattr(obj, name) % PAGE_TOKENS:
            raise ConfigError(f"{name} must be a multiple of {PAGE_TOKENS} tokens, got {getattr(obj, name)}")
