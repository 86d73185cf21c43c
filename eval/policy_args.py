"""The task tier's policy on the command line: one set of flags for `python -m eval` and the loop."""

from __future__ import annotations

import argparse
import dataclasses

from eval.decision import TaskPolicy

__all__ = ["add_task_policy_arguments", "task_policy_from_args"]

_FLAGS = {  # flag -> (TaskPolicy field, help)
    "--task-min-drop": ("min_drop", "accuracy drop each taskset must detect, as a fraction (default 0.05)"),
    "--task-alpha": ("alpha", "false rejections of a lossless change, over the whole suite (default 0.05)"),
    "--task-power": ("power", "power the design must reach at --task-min-drop (default 0.8)"),
    "--task-discordance": ("planned_discordance", "share of tasks assumed to flip either way, for sizing "
                           "(default 0.10)"),
}


def add_task_policy_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task-tier", choices=["judge", "smoke"],
                        help="judge: the sequential paired test decides (default with a real model); smoke: the "
                        "suite runs and is recorded but judges nothing (default for the embedded default model)")
    for flag, (_, text) in _FLAGS.items():
        parser.add_argument(flag, type=float, help=f"task tier: {text}")


def task_policy_from_args(args: argparse.Namespace, *, judge: bool = True) -> TaskPolicy:
    """The default policy with the flags given; `judge` is the tier's mode when --task-tier is absent.

    Raises:
        EvalConfigError: a value out of range.
    """
    changes = {field: getattr(args, flag[2:].replace("-", "_")) for flag, (field, _) in _FLAGS.items()}
    changes = {k: v for k, v in changes.items() if v is not None}
    tier = getattr(args, "task_tier", None)
    changes["judge"] = judge if tier is None else tier == "judge"
    return dataclasses.replace(TaskPolicy(), **changes)
