"""One error root: every package's base error, and the loop's outcomes, subclass tuner_errors.TunerError."""

from __future__ import annotations

import pytest

from autoresearch.champion.minimize import MinimizeError
from autoresearch.ground.errors import AutoresearchError, BaselineNotReady, ConfirmedElsewhere
from bench.errors import BenchError
from benchmarks.overhead import OverheadError
from eval.errors import EvalError
from gpu.errors import GpuError
from openai_client.errors import ClientError
from search_space.errors import SearchSpaceError
from serving.errors import ServingError
from tuner_errors import TunerError


@pytest.mark.parametrize("base", [AutoresearchError, MinimizeError, BenchError, EvalError, GpuError, ClientError, SearchSpaceError,
                                  ServingError, OverheadError, BaselineNotReady, ConfirmedElsewhere])
def test_every_package_error_has_the_one_root(base):
    assert issubclass(base, TunerError)
