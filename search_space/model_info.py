"""Facts about a checkpoint that the knob conditions and the memory model need, read without loading it.

Reads config.json (the nested text_config of multimodal checkpoints included), the quantization
config, and the safetensors headers (tensor names, dtypes, shapes and byte sizes). No tensor data
is read, so a 15 GiB checkpoint is described in milliseconds and a header-only test file suffices.

Usage:
    info = read_model_info(Path("models/qwen3.8-27b-exl3"))
    info.is_hybrid, info.has_mtp_weights, info.num_attention_layers
    info.weight_bytes(group="text")       # what exllamav3 puts in VRAM for the text model
"""

from __future__ import annotations

import json
import logging
import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from search_space.errors import ModelInfoError
from serving.config import quantization_config

__all__ = ["ModelInfo", "TensorInfo", "WeightGroup", "read_model_info", "read_safetensors_header", "weight_group"]

log = logging.getLogger(__name__)

# Bytes per element of every safetensors dtype (the format's own list).
DTYPE_BYTES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}
_MAX_HEADER_BYTES = 100 * 1024**2  # the safetensors reference implementation's own limit

WeightGroup = Literal["text", "embedding", "mtp", "vision"]
_VISION_PREFIXES = ("model.visual.", "visual.", "model.vision_tower.", "vision_tower.", "model.vision_model.")


@dataclass(frozen=True, slots=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    file: str


@dataclass(frozen=True, kw_only=True)
class ModelInfo:
    """A checkpoint's architecture, dimensions and tensors. Derived counts are properties."""

    directory: Path
    architecture: str
    model_type: str
    hidden_size: int
    intermediate_size: int
    layer_types: tuple[str, ...]
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel_dim: int = 0
    vocab_size: int
    max_position_embeddings: int | None = None
    mtp_num_hidden_layers: int = 0
    tie_word_embeddings: bool = False
    quant_method: str | None = None
    bits: float | None = None
    head_bits: float | None = None
    codebook: str | None = None
    dflash_block_size: int | None = None
    dflash_target_layers: int = 0
    sliding_window: int | None = None  # config sliding_window: the span of "sliding_attention" layers
    tensors: Mapping[str, TensorInfo] = field(default_factory=dict, repr=False)

    @property
    def num_layers(self) -> int:
        return len(self.layer_types)

    @property
    def num_linear_attention_layers(self) -> int:
        """Gated DeltaNet layers: they keep a recurrent state per slot instead of a KV cache."""
        return sum(1 for t in self.layer_types if t == "linear_attention")

    @property
    def num_attention_layers(self) -> int:
        """Layers that hold K/V in the paged cache (full or sliding attention)."""
        return self.num_layers - self.num_linear_attention_layers

    @property
    def num_sliding_attention_layers(self) -> int:
        """Sliding-window attention layers (counted in num_attention_layers too; a DFlash drafter keeps
        these as a window ring per slot instead of paged K/V)."""
        return sum(1 for t in self.layer_types if t == "sliding_attention")

    @property
    def is_hybrid(self) -> bool:
        return self.num_linear_attention_layers > 0

    @property
    def is_exl3(self) -> bool:
        return self.quant_method == "exl3"

    @property
    def has_mul1_codebook(self) -> bool:
        """The int8 GEMV path (EXL3_INT8_GEMV) only takes mul1-codebook tensors."""
        return self.is_exl3 and (self.codebook or "mul1") == "mul1"

    @property
    def has_mtp_weights(self) -> bool:
        """exllamav3 registers an MTP draft component only with mtp.* tensors and mtp_num_hidden_layers > 0."""
        return self.mtp_num_hidden_layers > 0 and any(name.startswith("mtp.") for name in self.tensors)

    @property
    def embedding_is_quantized(self) -> bool:
        """exllamav3 keeps an unquantized token embedding in system RAM (modules/embedding.py, prefer_cpu)."""
        return any(weight_group(n) == "embedding" and n.endswith(".trellis") for n in self.tensors)

    @property
    def head_is_embedding(self) -> bool:
        """A tied head without its own lm_head tensors: exllamav3 loads the embedding as the head."""
        return self.tie_word_embeddings and not any(n.startswith("lm_head.") for n in self.tensors)

    @property
    def fdim_qkv(self) -> int:
        """Width of a GDN layer's fused q/k/v projection (and of its conv state)."""
        return 2 * self.linear_num_key_heads * self.linear_key_head_dim + self.linear_v_dim

    @property
    def linear_v_dim(self) -> int:
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def has_split_gdn_projections(self) -> bool:
        """Qwen3.5's GDN layout: quantized in_proj_qkv and in_proj_z, unquantized in_proj_b and in_proj_a
        (what exllamav3's BC_GatedDeltaNetSplit graph path takes)."""
        names = self.tensors
        return any(n.endswith("linear_attn.in_proj_qkv.trellis") for n in names) and any(
            n.endswith("linear_attn.in_proj_b.weight") and t.dtype == "F16" for n, t in names.items())

    @property
    def gdn_qkv_bits(self) -> int:
        """Bits per weight of the GDN qkv projection: its trellis is [in/16, out/16, 16 * bits], 0 if none."""
        for name, tensor in self.tensors.items():
            if name.endswith("linear_attn.in_proj_qkv.trellis") and len(tensor.shape) == 3:
                return tensor.shape[2] // 16
        return 0

    def weight_bytes(self, group: WeightGroup) -> int:
        return sum(t.nbytes for t in self.tensors.values() if weight_group(t.name) == group)

    @property
    def total_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())

    def largest_linear(self, contains: str) -> tuple[int, int]:
        """(in_features, out_features) of the widest linear whose name contains `contains`, or (0, 0)."""
        best = (0, 0)
        for name, tensor in self.tensors.items():
            if contains not in name or weight_group(name) != "text":
                continue
            dims = _linear_dims(name, tensor, self.tensors)
            if dims and dims[0] * dims[1] > best[0] * best[1]:
                best = dims
        return best


def read_model_info(directory: Path) -> ModelInfo:
    """Read config.json and every *.safetensors header in `directory`.

    Raises:
        ModelInfoError: the directory, config.json or a safetensors header is missing or malformed.
    """
    directory = Path(directory)
    config_path = directory / "config.json"
    if not config_path.is_file():
        raise ModelInfoError(f"{directory} has no config.json; is it a model directory?")
    try:
        config = json.loads(config_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelInfoError(f"cannot read {config_path}: {exc}") from exc
    if not isinstance(config, dict):
        raise ModelInfoError(f"{config_path} is not a JSON object")

    tensors: dict[str, TensorInfo] = {}
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise ModelInfoError(f"{directory} has no *.safetensors files")
    for path in files:
        for name, tensor in read_safetensors_header(path).items():
            if name in tensors:
                raise ModelInfoError(f"tensor {name!r} appears in both {tensors[name].file} and {path.name}")
            tensors[name] = tensor
    return _model_info_from(directory, config, _quantization_config(directory, config), tensors)


def read_safetensors_header(path: Path) -> dict[str, TensorInfo]:
    """Tensor metadata of one safetensors file: an 8-byte little-endian length, then a JSON header.

    Raises:
        ModelInfoError: the header is malformed or the file is shorter than the header says.
    """
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            prefix = f.read(8)
            if len(prefix) != 8:
                raise ModelInfoError(f"{path} is too short to be a safetensors file")
            (header_len,) = struct.unpack("<Q", prefix)
            if header_len > _MAX_HEADER_BYTES or 8 + header_len > size:
                raise ModelInfoError(f"{path} declares a {header_len}-byte header; the file has {size} bytes")
            header = json.loads(f.read(header_len))
    except OSError as exc:
        raise ModelInfoError(f"cannot read {path}: {exc}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelInfoError(f"{path} has a malformed safetensors header: {exc}") from exc
    if not isinstance(header, dict):
        raise ModelInfoError(f"{path} has a malformed safetensors header (not a JSON object)")

    out: dict[str, TensorInfo] = {}
    data_bytes = size - 8 - header_len
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = entry["dtype"], tuple(entry["shape"]), entry["data_offsets"]
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelInfoError(f"{path}: tensor {name!r} has a malformed header entry {entry!r}") from exc
        if dtype not in DTYPE_BYTES:
            raise ModelInfoError(f"{path}: tensor {name!r} has unknown dtype {dtype!r}")
        nbytes = end - begin
        if nbytes != math.prod(shape) * DTYPE_BYTES[dtype]:
            raise ModelInfoError(f"{path}: tensor {name!r} spans {nbytes} bytes but {dtype}{list(shape)} needs "
                                 f"{math.prod(shape) * DTYPE_BYTES[dtype]}")
        if end > data_bytes:
            raise ModelInfoError(f"{path} is truncated: tensor {name!r} ends at byte {end} of a "
                                 f"{data_bytes}-byte data section")
        out[name] = TensorInfo(name=name, dtype=dtype, shape=shape, nbytes=nbytes, file=path.name)
    return out


def _quantization_config(directory: Path, config: dict[str, Any]) -> dict[str, Any]:
    try:
        return quantization_config(directory, config)
    except (OSError, ValueError) as exc:
        raise ModelInfoError(f"cannot read {directory / 'quantization_config.json'}: {exc}") from exc


def _model_info_from(directory: Path, config: dict, qcfg: dict, tensors: dict[str, TensorInfo]) -> ModelInfo:
    text = {**config, **config["text_config"]} if isinstance(config.get("text_config"), dict) else config
    dflash = config.get("dflash_config") if isinstance(config.get("dflash_config"), dict) else {}

    def need(key: str) -> Any:
        if key not in text:
            raise ModelInfoError(f"{directory / 'config.json'} lacks {key!r}")
        return text[key]

    architectures = config.get("architectures") or ["unknown"]
    hidden = int(need("hidden_size"))
    heads = int(need("num_attention_heads"))
    num_layers = int(need("num_hidden_layers"))
    layer_types = _layer_types(text, num_layers, directory)
    architecture = str(architectures[0])
    targets = dflash.get("target_layer_ids", config.get("target_layer_ids", []))
    block_size = config.get("block_size", dflash.get("block_size"))  # DFlashConfig: the top level first
    return ModelInfo(
        directory=directory,
        architecture=architecture,
        model_type=str(text.get("model_type", config.get("model_type", "unknown"))),
        hidden_size=hidden,
        intermediate_size=int(need("intermediate_size")),
        layer_types=layer_types,
        num_attention_heads=heads,
        num_kv_heads=int(text.get("num_key_value_heads") or heads),
        head_dim=int(text.get("head_dim") or hidden // heads),
        linear_num_key_heads=int(text.get("linear_num_key_heads", 0)),
        linear_num_value_heads=int(text.get("linear_num_value_heads", 0)),
        linear_key_head_dim=int(text.get("linear_key_head_dim", 0)),
        linear_value_head_dim=int(text.get("linear_value_head_dim", 0)),
        linear_conv_kernel_dim=int(text.get("linear_conv_kernel_dim", 0)),
        vocab_size=int(need("vocab_size")),
        max_position_embeddings=text.get("max_position_embeddings"),
        mtp_num_hidden_layers=int(text.get("mtp_num_hidden_layers", 0) or 0),
        tie_word_embeddings=bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", False))),
        quant_method=qcfg.get("quant_method"),
        bits=qcfg.get("bits"),
        head_bits=qcfg.get("head_bits"),
        codebook=qcfg.get("codebook"),
        dflash_block_size=int(block_size) if "dflash" in architecture.lower() and block_size else None,
        dflash_target_layers=len(targets) if isinstance(targets, list) else 0,
        sliding_window=int(text["sliding_window"]) if isinstance(text.get("sliding_window"), int) else None,
        tensors=tensors,
    )


def _layer_types(text: dict, num_layers: int, directory: Path) -> tuple[str, ...]:
    """layer_types from the config; Qwen3.5/Qwen3-Next without it use exllamav3's interval rule."""
    layer_types = text.get("layer_types")
    if layer_types is not None:
        if not isinstance(layer_types, list) or len(layer_types) != num_layers:
            raise ModelInfoError(f"{directory / 'config.json'}: layer_types must list {num_layers} layers")
        return tuple(str(t) for t in layer_types)
    if "linear_num_value_heads" in text:
        # architecture/qwen3_5.py read_qwen3_5_layer_types: every full_attention_interval-th layer
        interval = int(text.get("full_attention_interval", 4))
        return tuple("full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(num_layers))
    return ("full_attention",) * num_layers


def weight_group(name: str) -> WeightGroup:
    """Which part of a checkpoint a tensor belongs to, by its name."""
    if name.startswith("mtp."):
        return "mtp"
    if name.startswith(_VISION_PREFIXES):
        return "vision"
    if ".embed_tokens." in name or name.startswith("embed_tokens."):
        return "embedding"
    return "text"


def _linear_dims(name: str, tensor: TensorInfo, tensors: Mapping[str, TensorInfo]) -> tuple[int, int] | None:
    """(in, out) of an EXL3 linear (suh [in], svh [out]) or of a plain weight [out, in]."""
    if name.endswith(".suh"):
        svh = tensors.get(name[: -len(".suh")] + ".svh")
        if svh is not None and len(tensor.shape) == 1 and len(svh.shape) == 1:
            return tensor.shape[0], svh.shape[0]
        return None
    if name.endswith(".weight") and len(tensor.shape) == 2 and tensor.dtype in ("F16", "BF16", "F32"):
        return tensor.shape[1], tensor.shape[0]
    return None
