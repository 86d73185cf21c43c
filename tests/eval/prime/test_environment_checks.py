"""What `eval setup` checks of an installed taskset: its Python, its declared dependencies, verifiers' loader."""

from __future__ import annotations

import platform
import sys
from pathlib import Path

import pytest

from eval.prime.environment_checks import loading_problem, python_problem, unmet_requirements

STANDINS = Path(__file__).resolve().parents[2] / "broad_standins"


def test_a_taskset_requiring_another_python_is_named(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\nrequires-python = "==3.99.*"\n')
    problem = python_problem("x", tmp_path)
    assert problem.startswith(f"x: requires Python ==3.99.*; the eval stack runs {platform.python_version()}")
    (tmp_path / "pyproject.toml").write_text(f'[project]\nname = "x"\nrequires-python = ">={sys.version_info.major}.{sys.version_info.minor}"\n')
    assert python_problem("x", tmp_path) is None


def test_declared_requirements_are_checked_against_what_is_installed():
    assert unmet_requirements("verifiers") == []  # the eval extra satisfies verifiers' own
    assert unmet_requirements("reasoning-gym") == []


@pytest.mark.slow
def test_verifiers_loader_refuses_a_taskset_without_all_and_accepts_the_stand_ins(tmp_path, monkeypatch):
    package = tmp_path / "noall_fixture"
    package.mkdir()
    (package / "__init__.py").write_text(
        "import verifiers.v1 as vf\n\nclass NoAllTaskset(vf.Taskset):\n    def load(self):\n        return []\n")
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{STANDINS}")
    assert "defines no `__all__`" in loading_problem("noall-fixture")
    for taskset_id in ("aime25", "mmlu-pro", "i3-logic", "livecodebench"):
        assert loading_problem(taskset_id) is None, taskset_id
