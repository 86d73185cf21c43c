"""The search space: exllamav3's serving knobs as data, the Optuna bridge, and the VRAM model.

Usage:
    info = read_model_info(model_dir)
    space = build_space(SpaceContext(engine="exllamav3", model=info))   # checks the installed exllamav3
    study.enqueue_trial(baseline_params(space), user_attrs={"role": "baseline"}, skip_if_exists=True)
    config = sample_config(trial, space)                                  # a serving.config.ServingConfig
    check = check_fit(MemoryModel(info).estimate(config), Budget(vram_bytes=parse_bytes("24GiB")), calibration)
"""

from search_space.budget import (
    DEFAULT_RESERVE_BYTES,
    Budget,
    FitCheck,
    check_fit,
    gpu_memory_bytes,
    parse_bytes,
    require_fit,
)
from search_space.calibration import Calibration, MemoryObservation
from search_space.catalog import EXL3_KNOBS, TRANSFORMERS_KNOBS, catalog_for
from search_space.domains import USE_DEFAULT, Categorical, FloatRange, IntRange, UseDefault
from search_space.errors import (
    BudgetError,
    CatalogError,
    CatalogMismatch,
    DoesNotFit,
    ModelInfoError,
    SearchSpaceError,
    SpaceError,
)
from search_space.in_flight import InFlightFit, answers_in_flight
from search_space.knobs import EnvVar, ExlArg, Knob, SpaceContext, TransformersArg, When
from search_space.memory import MemoryEstimate, MemoryModel
from search_space.model_info import ModelInfo, TensorInfo, read_model_info, read_safetensors_header
from search_space.sampling import (
    baseline_params,
    config_from_params,
    distributions,
    sample_config,
    sample_values,
)
from search_space.space import SearchSpace, build_space
from search_space.surface_check import check_catalog, validate_catalog

__all__ = [
    "DEFAULT_RESERVE_BYTES",
    "EXL3_KNOBS",
    "TRANSFORMERS_KNOBS",
    "USE_DEFAULT",
    "Budget",
    "BudgetError",
    "Calibration",
    "CatalogError",
    "CatalogMismatch",
    "Categorical",
    "DoesNotFit",
    "EnvVar",
    "ExlArg",
    "FitCheck",
    "FloatRange",
    "InFlightFit",
    "IntRange",
    "Knob",
    "MemoryEstimate",
    "MemoryModel",
    "MemoryObservation",
    "ModelInfo",
    "ModelInfoError",
    "SearchSpace",
    "SearchSpaceError",
    "SpaceContext",
    "SpaceError",
    "TensorInfo",
    "TransformersArg",
    "UseDefault",
    "When",
    "answers_in_flight",
    "baseline_params",
    "build_space",
    "catalog_for",
    "check_catalog",
    "check_fit",
    "config_from_params",
    "distributions",
    "gpu_memory_bytes",
    "parse_bytes",
    "read_model_info",
    "read_safetensors_header",
    "require_fit",
    "sample_config",
    "sample_values",
    "validate_catalog",
]
