"""Shows the knobs that apply to a model, the baseline configuration, its VRAM, and the space's size.

Usage:
    python -m search_space --model DIR [--vram 24GiB] [--engine exllamav3|transformers]
                           [--draft-model DIR] [--pin NAME=VALUE ...] [--json]

Exit status: 0 ok; 1 failure (unreadable model, catalog mismatch, baseline over the budget); 2 usage.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from search_space.budget import Budget, check_fit, gpu_memory_bytes, parse_bytes
from search_space.domains import USE_DEFAULT, UseDefault
from search_space.errors import BudgetError, SpaceError
from search_space.knobs import SpaceContext
from search_space.memory import MemoryModel
from search_space.model_info import read_model_info
from search_space.report import SpaceSummary, render_rich, render_text, summary_dict
from search_space.space import build_space
from serving.config import ENGINES, engine_for_checkpoint
from tuner_errors import TunerError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m search_space",
        description="Show the serving knobs that apply to a model, the all-defaults baseline and its "
                    "predicted VRAM, and the size of the search space.",
    )
    parser.add_argument("--model", required=True, type=_directory, help="model directory (config.json + safetensors)")
    parser.add_argument("--vram", help="VRAM budget, e.g. 24GiB (an RTX 3090); default: the GPU's memory via "
                                       "NVML; without either the fit is not checked")
    parser.add_argument("--engine", choices=ENGINES, default=None,
                        help="default: the checkpoint's (exllamav3 for an EXL3 folder, else transformers)")
    parser.add_argument("--draft-model", type=_directory,
                        help="a draft checkpoint of the model's vocabulary: a DFlash drafter enables draft_mode "
                             "dflash, an ordinary causal LM draft_mode draft_model (exllamav3's architecture table "
                             "decides); its weights and cache count in the VRAM check")
    parser.add_argument("--pin", action="append", default=[], metavar="NAME=VALUE",
                        help="fix a knob (JSON value, or 'default' for exllamav3's); repeatable")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    parser.add_argument("-v", "--verbose", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _setup_logging(args.verbose)
    engine = args.engine or engine_for_checkpoint(args.model)
    try:
        pinned = dict(_parse_pin(text) for text in args.pin)
        vram = None
        if engine == "exllamav3":
            vram = parse_bytes(args.vram) if args.vram else gpu_memory_bytes()
            if vram is None:
                Console(stderr=True).print("no GPU is visible and no --vram was given: the baseline's fit is not "
                                           "checked (e.g. --vram 24GiB for an RTX 3090)", soft_wrap=True)
        budget = Budget(vram_bytes=vram) if vram is not None else None
    except (BudgetError, SpaceError) as exc:
        parser.error(str(exc))  # exits 2
    console = Console()
    try:
        model = read_model_info(args.model)
        draft = read_model_info(args.draft_model) if args.draft_model else None
        context = SpaceContext(engine=engine, model=model, draft_model=draft, cpu_count=os.cpu_count() or 1)
        space = build_space(context, pinned=pinned)
        baseline = space.baseline_config()
        fit = check_fit(MemoryModel(model, draft).estimate(baseline), budget) if budget else None
    except SpaceError as exc:
        parser.error(str(exc))
    except TunerError as exc:  # every package's deliberate errors (serving's, reading a checkpoint, too)
        Console(stderr=True).print(f"[red]{type(exc).__name__}[/red]: {exc}", soft_wrap=True)
        return 1
    summary = SpaceSummary(space=space, baseline=baseline, fit=fit)
    if args.json:
        print(json.dumps(summary_dict(summary), indent=2))
    elif console.is_terminal:
        render_rich(summary, console)
    else:
        print(render_text(summary))
    if fit is not None and not fit.fits:
        Console(stderr=True).print(
            f"[red]the baseline does not fit[/red]: predicted peak {fit.predicted_peak_bytes / 1024**3:.2f} GiB over "
            f"a usable {fit.budget.usable_bytes / 1024**3:.2f} GiB; pin cache_tokens or cache_slots lower", soft_wrap=True)
        return 1
    return 0


def _directory(text: str) -> Path:
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is not a directory")
    return path


def _parse_pin(text: str) -> tuple[str, Any]:
    name, sep, raw = text.partition("=")
    if not sep or not name:
        raise SpaceError(f"--pin takes NAME=VALUE, got {text!r}")
    if raw == UseDefault.OPTUNA_TOKEN:
        return name, USE_DEFAULT
    try:
        return name, json.loads(raw)
    except json.JSONDecodeError:
        return name, raw


def _setup_logging(verbose: bool) -> None:
    level = logging.DEBUG if verbose else logging.WARNING
    if sys.stderr.isatty():
        from rich.logging import RichHandler

        logging.basicConfig(level=level, format="%(message)s", handlers=[RichHandler(console=Console(stderr=True))])
    else:
        logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


if __name__ == "__main__":
    raise SystemExit(main())
