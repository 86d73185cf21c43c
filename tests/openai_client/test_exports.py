"""openai_client's public names: everything in __all__ exists, every module lists what it exports, and
its errors form one tree under the project's root."""

from __future__ import annotations

import importlib

import pytest

import openai_client
from tuner_errors import TunerError


def test_package_exports_exist():
    for name in openai_client.__all__:
        assert hasattr(openai_client, name), name


@pytest.mark.parametrize("module", ["client", "errors", "sse"])
def test_each_module_declares_its_public_names(module):
    mod = importlib.import_module(f"openai_client.{module}")
    public = {n for n, v in vars(mod).items() if not n.startswith("_") and getattr(v, "__module__", None) == mod.__name__}
    assert public <= set(mod.__all__), public - set(mod.__all__)


def test_errors_form_one_tree():
    for name in ("ClientConfigError", "ServerUnreachable", "ServerRejected", "StreamError", "ProtocolError"):
        assert issubclass(getattr(openai_client, name), openai_client.ClientError)
    assert issubclass(openai_client.ClientConfigError, ValueError)
    assert issubclass(openai_client.ClientError, TunerError)
