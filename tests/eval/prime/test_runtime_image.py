"""The runtime image's build context: the installed verifiers' harness program beside its committed lock."""

from __future__ import annotations

import hashlib
import re

from eval.prime.runtime_image import RUNTIME_DIR, build_command, image_tag, program_sources, write_context


def test_the_context_holds_each_locked_program_at_the_path_verifiers_writes_it(tmp_path):
    context = write_context(tmp_path / "ctx")
    (sha, source), = program_sources().items()
    assert hashlib.sha256((context / "scripts" / f"{sha}.py").read_bytes()).hexdigest() == sha
    assert (context / "scripts" / f"{sha}.py.lock").read_bytes() == (RUNTIME_DIR / "scripts" / f"{sha}.py.lock").read_bytes()
    assert build_command(context) == ["docker", "build", "-t", image_tag(), str(context)]


def test_the_dockerfile_pins_its_base_by_digest_and_installs_uv_by_hash():
    dockerfile = (RUNTIME_DIR / "Dockerfile").read_text()
    assert re.search(r"^FROM \S+@sha256:[0-9a-f]{64}$", dockerfile, flags=re.M)
    assert "--require-hashes" in dockerfile and "uv sync --locked --script" in dockerfile
    assert "/tmp/vf-scripts/" in dockerfile  # verifiers.v1.runtimes.base.Runtime.scripts_dir
    from verifiers.v1.runtimes.base import Runtime

    assert Runtime.scripts_dir == "/tmp/vf-scripts"
    assert re.match(r"^exl3-eval-runtime:[0-9a-f]{12}$", image_tag())
