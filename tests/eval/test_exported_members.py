"""The public names of the eval package are exactly its __all__ (as httpx checks its own)."""

from __future__ import annotations

import subprocess
import sys

import eval as eval_package


def test_all_exports_exist_and_nothing_public_is_left_out():
    exported = set(eval_package.__all__)
    public = {name for name in vars(eval_package) if not name.startswith("_")}
    modules = {name for name in public if type(getattr(eval_package, name)).__name__ == "module"}
    assert exported == public - modules
    assert all(hasattr(eval_package, name) for name in exported)


def test_importing_the_package_does_not_import_verifiers(repo_root):
    # The loop imports eval on every trial; verifiers (6 s to import) loads only in workers and dry-runs.
    probe = (
        "import sys, eval; print(sorted(m for m in ('verifiers', 'datasets', 'torch') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=repo_root, check=True
    )
    assert result.stdout.strip() == "[]"
