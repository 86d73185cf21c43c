"""`python -m bench` as a user runs it: the same command against this project's server and a peer."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import main
from bench.records import BenchResult

# small on purpose: 2 CPU cores
ARGS = [
    "--prefill", "128,512",
    "--decode", "256",
    "--decode-kinds", "math,mc",
    "--decode-tokens", "12",
    "--repeats", "3",
    "--max-repeats", "5",
    "--warmup", "1",
    "--prefill-target-ci", "0.2",
    "--decode-target-ci", "0.1",
    "--no-gpu",
]  # fmt: skip


@pytest.fixture(autouse=True)
def _restore_logging():
    """main() sets up logging as a CLI does; give the root logger back to pytest afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def _bench(url: str, out: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "bench", "--url", url, *ARGS, "--json", str(out)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def ours(tiny_server, tmp_path_factory) -> tuple[subprocess.CompletedProcess, BenchResult]:
    out = tmp_path_factory.mktemp("cli") / "ours.json"
    proc = _bench(tiny_server.url, out)
    return proc, BenchResult.from_dict(json.loads(out.read_text()))


@pytest.fixture(scope="module")
def peer(transformers_serve, tmp_path_factory) -> tuple[subprocess.CompletedProcess, BenchResult]:
    out = tmp_path_factory.mktemp("cli") / "peer.json"
    proc = _bench(transformers_serve.url, out)
    return proc, BenchResult.from_dict(json.loads(out.read_text()))


@pytest.mark.slow
def test_the_command_measures_this_projects_server(ours):
    proc, result = ours
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Prefill (cold TTFT, unique prompts)" in proc.stdout
    assert "prefill_tok_per_s_server@512:" in proc.stdout  # greppable summary
    assert result.server.accepts_ignore_eos and result.server.reports_timings
    assert result.invalid_runs == 0


@pytest.mark.slow
def test_the_same_command_measures_transformers_serve_without_changes(peer):
    proc, result = peer
    assert proc.returncode == 0, proc.stdout + proc.stderr
    server = result.server
    assert server.server_info is None  # no /v1/server_info there: a different server indeed
    assert not server.accepts_ignore_eos  # it refuses unknown fields with 422; bench went on without
    assert not server.reports_timings and not server.reports_cached_tokens
    for point in result.prefill:
        assert len(point.valid_runs) >= 3
        assert point.prefill_tok_per_s_client.median > 0
        assert point.prefill_tok_per_s_server is None  # nothing invented where the server says nothing
    assert result.prefill[0].prompt_tokens_median < result.prefill[1].prompt_tokens_median
    for point in result.decode:
        # without ignore_eos the random model may stop early: such runs are invalid, never averaged
        for run in point.runs:
            assert run.is_valid == (run.completion_tokens == 12), run.invalid_reason
        assert point.valid_runs, point.invalid_reasons
        assert point.decode_tok_per_s_client.median > 0


@pytest.mark.slow
def test_compare_and_noise_floor_read_stored_results(ours, peer, tmp_path, capsys):
    paths = []
    for name, (_, result) in (("ours", ours), ("peer", peer)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(result.to_dict()))
        paths.append(str(path))
    # the peer reports no server timings: comparing them is refused by name, never skipped
    assert main(["compare", *paths, "--noise-floor", paths[0], paths[0]]) == 1
    assert "prefill_tok_per_s_server@512 (candidate has no samples)" in capsys.readouterr().out
    argv = ["compare", *paths, "--metrics", "client", "--noise-floor", paths[0], paths[0]]
    assert main([*argv, "--json", str(tmp_path / "cmp.json")]) == 0
    out = capsys.readouterr().out
    assert "prefill_tok_per_s_client@512: " in out
    comparisons = json.loads((tmp_path / "cmp.json").read_text())["comparisons"]
    assert {c["verdict"] for c in comparisons} <= {"faster", "slower", "same"}
    assert main(["noise-floor", paths[0], paths[0]]) == 0
    assert "prefill_tok_per_s_client@128: 0.0000" in capsys.readouterr().out


def test_usage_errors_exit_2_and_name_the_value(capsys):
    assert main(["--url", "127.0.0.1:8000"]) == 2
    assert "http://" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["--url", "http://127.0.0.1:8000", "--prefill", "lots"])
    assert exc.value.code == 2
    assert main(["--url", "http://127.0.0.1:8000", "--repeats", "5", "--max-repeats", "2"]) == 2
    capsys.readouterr()
    assert main(["--url", "http://127.0.0.1:8000", "--decode-until", "eos", "--decode-tokens", "8"]) == 2
    assert "decode_min_tokens must be in [3, decode_tokens=8], got 16" in capsys.readouterr().out


def test_an_unreachable_server_exits_1_with_the_reason(capsys):
    assert main(["--url", "http://127.0.0.1:9", "--no-gpu", "--prefill", "128", "--decode", "none"]) == 1
    assert "ServerUnreachable" in capsys.readouterr().out


def test_a_missing_result_file_is_a_clear_error(tmp_path, capsys):
    assert main(["noise-floor", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 1
    assert "is not a bench result JSON" in capsys.readouterr().out
