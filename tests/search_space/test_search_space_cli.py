"""`python -m search_space`: exit 0 ok, 1 failure, 2 usage; plain lines off a terminal, JSON, rich table."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from search_space.__main__ import main
from search_space.budget import Budget, check_fit, gpu_memory_bytes
from search_space.knobs import SpaceContext
from search_space.memory import MemoryModel
from search_space.model_info import read_model_info
from search_space.report import SpaceSummary, render_rich
from search_space.space import build_space

ROOT = Path(__file__).resolve().parents[2]


def test_the_module_runs_as_a_real_process_and_prints_greppable_lines(qwen27b_mtp_dir):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    result = subprocess.run(
        [sys.executable, "-m", "search_space", "--model", str(qwen27b_mtp_dir), "--vram", "24GiB",
         "--engine", "exllamav3"],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(": ", 1) for line in result.stdout.splitlines() if not line.startswith("knob: "))
    assert lines["engine"] == "exllamav3" and lines["baseline_fits"] == "yes"
    assert int(lines["vram_budget_bytes"]) == 24 * 1024**3
    assert int(lines["space_size"].split()[0]) > 10**12
    assert json.loads(lines["baseline"])["env"] == {}
    knobs = [line for line in result.stdout.splitlines() if line.startswith("knob: ")]
    assert any(line.startswith("knob: draft_mode domain={none, ngram, mtp}") for line in knobs)
    assert any(line.startswith("knob: cache_slots ") for line in knobs)


def test_json_output_carries_knobs_baseline_memory_and_size(qwen27b_dir, capsys):
    assert main(["--model", str(qwen27b_dir), "--vram", "24GiB", "--engine", "exllamav3", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["baseline"]["engine"] == "exllamav3" and report["memory"]["fits"] is True
    assert report["memory"]["peak_bytes"] > report["memory"]["resident_bytes"] > 12 * 1024**3
    names = {k["name"] for k in report["knobs"]}
    assert "EXL3_INT8_GEMV" in names and "dynamic_draft_tokens" not in names  # no MTP weights, no DFlash draft
    assert isinstance(report["space_size"], int)


def test_pins_fix_knobs_in_the_baseline(qwen27b_dir, capsys):
    argv = ["--model", str(qwen27b_dir), "--vram", "24GiB", "--engine", "exllamav3", "--json",
            "--pin", "cache_slots=1", "--pin", "recurrent_checkpoint_interval=default"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["baseline"]["args"]["cache_slots"] == 1
    assert {k["name"]: k["pinned"] for k in report["knobs"]}["cache_slots"] is True


def test_the_cpu_engine_shows_its_own_knobs_without_a_vram_budget(tiny_hf_dir, capsys):
    assert main(["--model", str(tiny_hf_dir), "--engine", "transformers"]) == 0
    out = capsys.readouterr().out
    assert "knob: attn_implementation domain={sdpa, eager}" in out and "vram_budget_bytes" not in out
    assert "space_size: " in out


def test_a_baseline_over_the_budget_is_a_failure(qwen27b_dir, capsys):
    assert main(["--model", str(qwen27b_dir), "--vram", "12GiB", "--engine", "exllamav3"]) == 1
    captured = capsys.readouterr()
    assert "baseline_fits: no" in captured.out and "does not fit" in captured.err


def test_an_unreadable_checkpoint_is_a_failure(tmp_path, capsys):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"\x00")
    assert main(["--model", str(tmp_path), "--vram", "24GiB", "--engine", "exllamav3"]) == 1
    assert "ModelInfoError" in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra, message",
    [(["--vram", "24G"], "cannot read '24G'"), (["--vram", "24GiB", "--pin", "cache_slots"], "NAME=VALUE"),
     (["--vram", "24GiB", "--pin", "cache_slots=3"], "domain"), (["--vram", "24GiB", "--pin", "nope=1"], "unknown knob"),
     (["--vram", "24GiB", "--engine", "llama.cpp"], "invalid choice")],
)
def test_usage_errors_exit_2_with_a_message(qwen27b_dir, capsys, extra, message):
    with pytest.raises(SystemExit) as exc:
        main(["--model", str(qwen27b_dir), "--engine", "exllamav3", *extra])
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_a_missing_model_directory_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--model", str(tmp_path / "absent"), "--vram", "24GiB"])
    assert exc.value.code == 2 and "is not a directory" in capsys.readouterr().err


@pytest.mark.skipif(gpu_memory_bytes() is not None, reason="NVML reports a GPU here, so the fit is checked")
def test_an_exl3_checkpoint_means_exllamav3_even_without_a_gpu(qwen27b_dir, tiny_hf_dir, capsys):
    assert main(["--model", str(qwen27b_dir), "--json"]) == 0  # no --engine, no --vram, no GPU
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["baseline"]["engine"] == "exllamav3" and "memory" not in report
    assert "fit is not checked" in captured.err and "--vram" in captured.err
    assert main(["--model", str(tiny_hf_dir), "--json"]) == 0  # a Hugging Face folder: the CPU engine
    assert json.loads(capsys.readouterr().out)["baseline"]["engine"] == "transformers"


def test_on_a_terminal_the_knobs_are_a_rich_table(qwen27b_dir):
    info = read_model_info(qwen27b_dir)
    space = build_space(SpaceContext(engine="exllamav3", model=info))
    baseline = space.baseline_config()
    summary = SpaceSummary(space=space, baseline=baseline,
                           fit=check_fit(MemoryModel(info).estimate(baseline), Budget(vram_bytes=24 * 1024**3)))
    buffer = io.StringIO()
    render_rich(summary, Console(file=buffer, force_terminal=True, width=250, color_system=None))
    text = buffer.getvalue()
    assert "may change outputs" in text and "EXL3_GDN_SUB_CHUNK" in text and "┃" in text
    assert "fits" in text and "space size" in text
