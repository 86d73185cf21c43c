"""Suite definitions match the issue, --dry-run validates them with verifiers, and missing parts fail clearly."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from eval.errors import EvalConfigError, MissingDataset, MissingEnvironment
from eval.paths import EvalPaths
from eval.prime.locks import load_locks
from eval.runner import dry_run, preflight
from eval.suites import SuiteOverrides, TasksetSpec, apply_overrides, get_suite


def _shape(name):
    return [(t.name, t.limit, t.max_tokens, t.rollouts, t.shuffle) for t in get_suite(name).tasksets]


def test_suites_are_the_issues_selections_and_budgets():
    assert _shape("broad") == [
        ("aime25", 3, 32768, 1, True),
        ("mmlu-pro", 10, 8192, 1, True),
        ("i3-logic", 4, 16384, 1, True),
        ("livecodebench", 3, 16384, 1, True),
    ]
    assert _shape("smoke") == [("aime24", 3, 32768, 1, False)]
    assert _shape("quick") == [
        ("aime24", 10, 32768, 1, True),
        ("aime25", 10, 32768, 1, True),
        ("aime26", 10, 32768, 1, True),
        ("i3-logic", 24, 32768, 1, True),
        ("livecodebench", 12, 32768, 1, True),
    ]
    assert _shape("full") == [
        ("aime24", None, 32768, 20, False),
        ("aime25", None, 32768, 20, False),
        ("aime26", None, 32768, 20, False),
        ("i3-logic", None, 32768, 1, False),
        ("livecodebench", None, 32768, 2, False),
    ]
    lcb = get_suite("full").taskset("livecodebench")
    assert dict(lcb.knobs) == {"version": "v6", "start_date": "8/1/2024", "end_date": "5/1/2025"}
    for name in ("broad", "smoke", "quick", "full"):
        suite = get_suite(name)
        assert (suite.harness, suite.runtime.type, suite.max_concurrent) == ("null", "docker", 1)
        assert suite.sampling.temperature == 0.0 and suite.sampling.enable_thinking
        assert all(t.seed == 0 for t in suite.tasksets)
    offline = get_suite("offline")
    assert offline.runtime.type == "subprocess" and all(t.source == "offline" for t in offline.tasksets)


def test_overrides_return_a_copy_and_leave_the_registry_alone():
    small = apply_overrides(
        get_suite("offline"), SuiteOverrides(limit=1, max_tokens=8, tasksets=("rg-logic",))
    )
    assert [(t.name, t.limit, t.max_tokens) for t in small.tasksets] == [("rg-logic", 1, 8)]
    assert get_suite("offline").taskset("rg-logic").limit is None  # every generated task
    with pytest.raises(EvalConfigError, match="no taskset"):
        apply_overrides(get_suite("offline"), SuiteOverrides(tasksets=("aime25",)))
    with pytest.raises(EvalConfigError, match="needs docker"):
        apply_overrides(get_suite("offline"), SuiteOverrides(runtime_image="python:3.12"))
    with pytest.raises(EvalConfigError, match="unknown suite"):
        get_suite("huge")


@pytest.mark.parametrize("suite_name", ["broad", "smoke"])
def test_prime_suites_pass_dry_run_without_a_model_or_their_environments(suite_name, tmp_path):
    entries = dry_run(
        get_suite(suite_name), locks=load_locks(), paths=EvalPaths(tmp_path), run_dir=tmp_path / "run"
    )
    assert [e.name for e in entries] == [t.name for t in get_suite(suite_name).tasksets]
    for entry in entries:
        config = entry.config
        assert config["push"] is False and config["max_concurrent"] == 1
        assert config["env"]["agent"]["harness"]["id"] == "null"
        assert config["env"]["agent"]["runtime"]["type"] == "docker"
        assert config["sampling"]["temperature"] == 0.0
        assert config["sampling"]["extra_body"]["chat_template_kwargs"] == {"enable_thinking": True}
        assert config["select"]["seed"] == 0
        assert entry.dataset_ready is False  # nothing downloaded here: dry-run does not need it


def test_dry_run_binds_each_dataset_the_way_its_taskset_reads_it(tmp_path):
    entries = {
        e.name: e.config
        for e in dry_run(
            get_suite("broad"), locks=load_locks(), paths=EvalPaths(tmp_path), run_dir=tmp_path / "run"
        )
    }
    snapshots = tmp_path / "huggingface" / "hub"
    assert entries["aime25"]["env"]["taskset"]["dataset_name"].startswith(
        str(snapshots / "datasets--opencompass--AIME2025")
    )
    i3 = entries["i3-logic"]["env"]["taskset"]["dataset"]
    assert i3["name"].endswith("/logic") and i3["subset"] == "default"
    assert entries["mmlu-pro"]["env"]["taskset"] == {
        "id": "mmlu-pro",
        "n_shot": 0,
    }  # bound by working directory


def test_dry_run_reports_what_verifiers_rejects(tmp_path):
    suite = get_suite("offline")
    bad = dataclasses.replace(
        suite, tasksets=(dataclasses.replace(suite.tasksets[0], knobs=(("data_source", "GSM8K"),)),)
    )
    with pytest.raises(EvalConfigError, match="data_source"):
        dry_run(bad, locks=load_locks(), paths=EvalPaths(tmp_path), run_dir=tmp_path / "run")


def test_the_offline_suite_is_fully_validated_by_dry_run(tmp_path):
    entries = dry_run(
        get_suite("offline"), locks=load_locks(), paths=EvalPaths(tmp_path), run_dir=tmp_path / "run"
    )
    assert all(e.validated == "full" and e.environment_installed for e in entries)


def test_a_missing_environment_names_it_and_the_setup_command(tmp_path):
    with pytest.raises(MissingEnvironment, match=r"aime24.*python -m eval setup") as info:
        preflight(get_suite("smoke"), locks=load_locks(), paths=EvalPaths(tmp_path))
    assert info.value.names == ("aime24",)
    assert "python -m eval data aime24" in str(info.value)  # everything missing is named at once


def test_a_missing_dataset_names_it_and_the_data_command(tmp_path):
    # An installed taskset (ours) bound to a pinned Hub dataset that is not in the cache.
    suite = dataclasses.replace(
        get_suite("offline"),
        tasksets=(
            TasksetSpec(
                name="t", taskset_id="eval-mmath", max_tokens=8, limit=1, shuffle=False, dataset="aime25"
            ),
        ),
    )
    with pytest.raises(MissingDataset, match=r"aime25.*python -m eval data aime25") as info:
        preflight(suite, locks=load_locks(), paths=EvalPaths(tmp_path))
    assert info.value.names == ("aime25",)


def _cli(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "eval", *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )


def test_cli_dry_run_of_broad_writes_resolved_configs(tmp_path, repo_root):
    out = tmp_path / "resolved"
    result = _cli(
        "run",
        "--suite",
        "broad",
        "--dry-run",
        "--cache-dir",
        str(tmp_path),
        "--output",
        str(out),
        cwd=repo_root,
    )
    assert result.returncode == 0, result.stderr
    assert "suite: broad configuration valid" in result.stdout
    assert "mmlu-pro.config: valid" in result.stdout
    config = json.loads((out / "livecodebench.eval-config.json").read_text())
    assert config["env"]["taskset"]["version"] == "v6" and config["sampling"]["max_tokens"] == 16384


def test_cli_run_without_the_environment_fails_with_the_fix(tmp_path, repo_root):
    result = _cli(
        "run",
        "--suite",
        "smoke",
        "--url",
        "http://127.0.0.1:9",
        "--model",
        "m",
        "--cache-dir",
        str(tmp_path),
        cwd=repo_root,
    )
    assert result.returncode == 1
    assert "MissingEnvironment" in result.stdout and "python -m eval setup" in result.stdout.replace(
        "\n", " "
    )


def test_cli_usage_errors_exit_2(repo_root):
    assert _cli("run", "--suite", "broad", cwd=repo_root).returncode == 2
    assert _cli("run", "--suite", "broad", "--dry-run", "--limit", "0", cwd=repo_root).returncode == 2


def test_cli_data_check_of_an_uncached_dataset_fails_clearly(tmp_path, repo_root):
    result = _cli("data", "aime25", "--check", "--cache-dir", str(tmp_path), cwd=repo_root)
    assert result.returncode == 1 and "MissingDataset" in result.stdout
    unknown = _cli("data", "gsm8k", "--cache-dir", str(tmp_path), cwd=repo_root)
    assert unknown.returncode == 1 and "unknown dataset" in unknown.stdout


def _docker_engine_answers() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(
    _docker_engine_answers(), reason="a Docker engine answers here; this checks the message without one"
)
def test_a_docker_suite_without_a_docker_engine_fails_before_any_model_call(tmp_path):
    from eval.errors import RuntimeUnavailable

    suite = dataclasses.replace(
        get_suite("smoke"),
        tasksets=(TasksetSpec(name="t", taskset_id="eval-mmath", max_tokens=8, limit=1, shuffle=False),),
    )
    with pytest.raises(RuntimeUnavailable, match="Docker is not usable.*offline"):
        preflight(suite, locks=load_locks(), paths=EvalPaths(tmp_path))


def _fake_docker(tmp_path, monkeypatch, *, engine_up: bool, images: tuple[str, ...] = ()) -> None:
    """A stand-in `docker` CLI first on PATH (the engine is an outside boundary): `info` answers or not,
    `image inspect` knows only `images`."""
    known = " ".join(images)
    script = tmp_path / "fakebin" / "docker"
    script.parent.mkdir(parents=True)
    script.write_text(f"""#!/bin/sh
case "$1" in
  info) {'echo 27.0.0' if engine_up else 'echo "Cannot connect to the Docker daemon" >&2; exit 1'} ;;
  image) for i in {known}; do [ "$i" = "$5" ] && echo sha256:feedface && exit 0; done; exit 1 ;;
esac
""")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{script.parent}:{os.environ['PATH']}")


def _docker_suite():
    return dataclasses.replace(
        get_suite("broad"),
        tasksets=(TasksetSpec(name="t", taskset_id="eval-mmath", max_tokens=8, limit=1, shuffle=False),),
    )


def test_each_missing_piece_is_one_line_naming_it_and_its_fix(tmp_path, monkeypatch):
    from eval.preflight import missing_pieces

    _fake_docker(tmp_path, monkeypatch, engine_up=False)
    lines = [m.line for m in missing_pieces(get_suite("broad"), locks=load_locks(), paths=EvalPaths(tmp_path))]
    assert lines[:4] == [f"taskset {n} is not installed; fix: `python -m eval setup` (needs GitHub)"
                         for n in ("aime25", "i3-logic", "livecodebench", "mmlu-pro")]
    assert lines[4:8] == [f"dataset {n} is not in {tmp_path / 'huggingface' / 'hub'}; fix: `python -m eval data {n}` "
                          "(needs the Hub; runs are offline and never download)"
                          for n in ("aime25", "i3-logic", "livecodebench", "mmlu-pro")]
    assert lines[8].startswith("Docker is not usable (Cannot connect to the Docker daemon); fix: start the Docker")
    assert len(lines) == 9


def test_a_docker_suite_whose_image_is_not_built_names_the_image_command(tmp_path, monkeypatch):
    from eval.errors import RuntimeUnavailable
    from eval.prime.runtime_image import image_tag

    _fake_docker(tmp_path, monkeypatch, engine_up=True)
    with pytest.raises(RuntimeUnavailable) as info:
        preflight(_docker_suite(), locks=load_locks(), paths=EvalPaths(tmp_path))
    assert str(info.value).splitlines()[1] == (
        f"runtime image {image_tag()} is not in the local Docker engine; fix: `python -m eval image`")
    _fake_docker(tmp_path / "built", monkeypatch, engine_up=True, images=(image_tag(),))
    preflight(_docker_suite(), locks=load_locks(), paths=EvalPaths(tmp_path))  # everything is here


def test_the_subprocess_runtime_needs_no_docker(tmp_path, monkeypatch):
    _fake_docker(tmp_path, monkeypatch, engine_up=False)
    suite = apply_overrides(_docker_suite(), SuiteOverrides(runtime="subprocess"))
    assert suite.runtime.type == "subprocess"
    preflight(suite, locks=load_locks(), paths=EvalPaths(tmp_path))
