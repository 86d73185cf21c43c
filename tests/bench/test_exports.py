"""bench's public names: everything in __all__ exists, and every module lists what it exports."""

from __future__ import annotations

import importlib

import pytest

import bench

MODULES = [
    "corpus",
    "errors",
    "ladder",
    "plan",
    "prompts",
    "records",
    "report",
    "stats",
    "telemetry",
    "timing",
]


def test_package_exports_exist():
    for name in bench.__all__:
        assert hasattr(bench, name), name


@pytest.mark.parametrize("module", MODULES)
def test_each_module_declares_its_public_names(module):
    mod = importlib.import_module(f"bench.{module}")
    public = {
        n
        for n, v in vars(mod).items()
        if not n.startswith("_") and getattr(v, "__module__", None) == mod.__name__
    }
    assert public <= set(mod.__all__), public - set(mod.__all__)


def test_errors_form_one_tree():
    for name in ("BenchConfigError", "CorpusError", "MissingMetric"):
        assert issubclass(getattr(bench, name), bench.BenchError)
    assert issubclass(bench.BenchConfigError, ValueError)
