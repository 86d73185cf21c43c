"""Against a server that requires a key: fidelity and a suite run authenticate, and the key is never written."""

from __future__ import annotations

import os

import pytest

from eval.errors import EndpointError
from eval.fidelity import capture_reference
from eval.paths import EvalPaths
from eval.probes import ProbeSetConfig, build_probe_set
from eval.runner import run_suite
from eval.store import EvalStore
from eval.suites import SuiteOverrides, apply_overrides, get_suite
from openai_client import Endpoint

pytestmark = pytest.mark.slow

KEY = "sk-eval-test-7d1f0c"


@pytest.fixture(scope="module")
def keyed_server(tiny_model_dir, tmp_path_factory):
    from serving.config import ServingConfig
    from serving.launcher import LaunchSpec, free_port, launch

    root = tmp_path_factory.mktemp("keyed")
    key_file = root / "api-key"
    key_file.write_text(KEY)
    os.chmod(key_file, 0o600)
    spec = LaunchSpec(
        model_dir=tiny_model_dir,
        config=ServingConfig.from_dict({"engine": "transformers", "args": {"threads": 1}}),
        port=free_port(),
        log_path=root / "server.log",
        api_key_file=key_file,
        startup_timeout_s=180,
    )
    with launch(spec) as server:
        yield server


def test_fidelity_sends_the_key_and_fails_clearly_without_it(keyed_server, tmp_path):
    store = EvalStore(f"sqlite:///{tmp_path / 'r.db'}")
    probes = build_probe_set(ProbeSetConfig(continuation_tokens=2, kinds=("math",)))
    with pytest.raises(EndpointError, match="401") as info:
        capture_reference(keyed_server.url, probes, store=store, model_manifest_hash="m", label="no key")
    assert info.value.status_code == 401
    reference = capture_reference(
        keyed_server.url, probes, store=store, model_manifest_hash="m", label="keyed", api_key=KEY
    )
    assert reference.n_positions == 4
    store.close()


def test_a_suite_run_authenticates_and_writes_no_secret(keyed_server, tmp_path):
    suite = apply_overrides(
        get_suite("offline"), SuiteOverrides(limit=1, max_tokens=4, tasksets=("rg-math",))
    )
    result = run_suite(
        suite, Endpoint(url=keyed_server.url, model="tiny", api_key=KEY), paths=EvalPaths(tmp_path)
    )
    [t] = result.tasksets
    assert (t.rollouts, t.failures) == (1, 0), t.episodes
    written = [
        p for p in tmp_path.rglob("*") if p.is_file() and p.suffix in (".json", ".jsonl", ".log", ".toml")
    ]
    assert written and not [p for p in written if KEY in p.read_text(errors="replace")]
