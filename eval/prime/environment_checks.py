"""What `python -m eval setup` checks of each installed taskset beyond its version: that this interpreter
is one its package supports, that its declared dependencies are here, and that verifiers 0.4.0 loads it.

Why: environments are installed `--no-deps` (an environment must not replace the pinned verifiers), so a
dependency only they declare (i3-logic's `markdown`) would be missing at the first rollout; and verifiers
0.4.0 refuses a taskset module without `__all__` exporting exactly one Taskset subclass, a rule the
environments' pinned verifiers (0.3.2.dev86) did not have. Each check asks the installed package itself.

Usage:
    python_problems(project_dir)          # requires-python vs this interpreter
    unmet_requirements("i3-logic")        # ["markdown>=3.5.1"] until installed
    loading_problem("i3-logic")           # None, or verifiers' own error message
"""

from __future__ import annotations

import platform
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

__all__ = ["loading_problem", "python_problem", "unmet_requirements"]


def python_problem(name: str, project_dir: Path) -> str | None:
    """Why this interpreter is not one `project_dir`'s pyproject supports; None when it is (or says nothing)."""
    pyproject = project_dir / "pyproject.toml"
    if not pyproject.is_file():
        return None
    requires = tomllib.loads(pyproject.read_text()).get("project", {}).get("requires-python")
    version = platform.python_version()
    if requires and not SpecifierSet(requires).contains(version, prereleases=True):
        return (f"{name}: requires Python {requires}; the eval stack runs {version} (one version for the host "
                "venv and the runtime image: eval/prime/runtime/Dockerfile)")
    return None


def unmet_requirements(distribution: str) -> list[str]:
    """The installed distribution's declared requirements (for this interpreter) that are not satisfied."""
    unmet = []
    for text in metadata.requires(distribution) or []:
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        try:
            installed = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            unmet.append(str(requirement))
            continue
        if not requirement.specifier.contains(installed, prereleases=True):
            unmet.append(str(requirement))
    return unmet


def loading_problem(taskset_id: str) -> str | None:
    """verifiers' own loader, in a fresh interpreter, on the installed taskset; None when it loads."""
    code = ("import sys\nfrom verifiers.v1.utils.loaders import taskset_class\n"
            "print(taskset_class(sys.argv[1]).__name__)")
    probe = subprocess.run([sys.executable, "-c", code, taskset_id], capture_output=True, text=True, timeout=300)
    if probe.returncode == 0:
        return None
    lines = (probe.stderr or probe.stdout).strip().splitlines()
    return f"{taskset_id}: verifiers cannot load it: {lines[-1] if lines else 'no output'}"
