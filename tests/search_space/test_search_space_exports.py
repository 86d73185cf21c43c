"""Every public name is exported, and every module's `__all__` names what it defines (httpx style)."""

import importlib
import pkgutil

import pytest

import search_space

MODULES = sorted(m.name for m in pkgutil.iter_modules(search_space.__path__) if m.name != "__main__")


def test_the_package_exports_exactly_its_public_names():
    assert sorted(search_space.__all__) == sorted(set(search_space.__all__))
    for name in search_space.__all__:
        assert hasattr(search_space, name), name


@pytest.mark.parametrize("module_name", MODULES)
def test_each_modules_all_lists_names_it_defines(module_name):
    module = importlib.import_module(f"search_space.{module_name}")
    assert module.__all__, module_name
    for name in module.__all__:
        assert hasattr(module, name), f"{module_name}.{name}"
        assert not name.startswith("_")
