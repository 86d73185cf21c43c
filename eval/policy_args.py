"""The gate's policy and probe set on the command line: one set of flags for `python -m eval`, the loop
and `python -m autoresearch sweep`."""

from __future__ import annotations

import argparse
import dataclasses

from eval.decision import FidelityPolicy, GatePolicy, TaskPolicy
from eval.probes import ProbeSet, ProbeSetConfig, build_probe_set
from eval.task_decision import TASK_TIER_MODES

__all__ = ["add_gate_policy_arguments", "add_probe_arguments", "add_task_policy_arguments", "gate_policy_from_args",
           "probe_set_from_args", "task_policy_from_args"]

_FLAGS = {  # flag -> (TaskPolicy field, help)
    "--task-min-drop": ("min_drop", "accuracy drop each taskset must detect, as a fraction (default 0.05)"),
    "--task-alpha": ("alpha", "false rejections of a lossless change, over the whole suite (default 0.05)"),
    "--task-power": ("power", "power the design must reach at --task-min-drop (default 0.8)"),
    "--task-discordance": ("planned_discordance", "share of tasks assumed to flip either way, for sizing "
                           "(default 0.10)"),
}


def add_task_policy_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task-tier", choices=TASK_TIER_MODES,
                        help="judge: the sequential paired test decides whether anything was lost (default with a "
                        "real model, and refused for a suite too small for the claim); guard: the exact sign test "
                        "rejects only losses the suite's tasks can show and RESULTS.md states the drop it catches "
                        "(default for --suite broad); smoke: the suite runs and is recorded but judges nothing "
                        "(default for the embedded default model)")
    for flag, (_, text) in _FLAGS.items():
        parser.add_argument(flag, type=float, help=f"task tier: {text}")


def task_policy_from_args(args: argparse.Namespace, *, mode: str = "judge") -> TaskPolicy:
    """The default policy with the flags given; `mode` is the tier's mode when --task-tier is absent.

    Raises:
        EvalConfigError: a value out of range.
    """
    changes = {field: getattr(args, flag[2:].replace("-", "_")) for flag, (field, _) in _FLAGS.items()}
    changes = {k: v for k, v in changes.items() if v is not None}
    tier = getattr(args, "task_tier", None)
    changes["mode"] = mode if tier is None else tier
    return dataclasses.replace(TaskPolicy(), **changes)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _token_sizes(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated token counts, got {text!r}") from None


def add_probe_arguments(p: argparse.ArgumentParser) -> None:
    """The fidelity probe set's flags (`probe_set_from_args` builds it)."""
    p.add_argument(
        "--continuation-tokens", type=_positive_int, default=128, help="greedy tokens per suite-kind probe"
    )
    p.add_argument(
        "--long-context-tokens",
        type=_token_sizes,
        default=(8192, 32768),
        help="comma-separated target prompt sizes of the long-context probes (e.g. 8192,32768)",
    )
    p.add_argument("--long-continuation-tokens", type=_positive_int, default=32,
                   help="greedy tokens after each long-context probe's prompt (default 32)")
    p.add_argument("--top-k", type=_positive_int, default=20, help="logprobs per position (server max 20)")


def probe_set_from_args(args: argparse.Namespace) -> ProbeSet:
    return build_probe_set(
        ProbeSetConfig(
            continuation_tokens=args.continuation_tokens,
            long_context_tokens=args.long_context_tokens,
            long_continuation_tokens=args.long_continuation_tokens,
            top_k=args.top_k,
        )
    )


def add_gate_policy_arguments(p: argparse.ArgumentParser) -> None:
    """The fidelity gate's flags and the task tier's (`gate_policy_from_args` reads them)."""
    p.add_argument("--noise-factor", type=float, default=3.0, help="limit = factor x max(floor, min floor)")
    p.add_argument("--min-floor-kl-mean", type=float, default=1e-4,
                   help="the KL-mean floor assumed when the measured one is smaller, nats (default 1e-4)")
    p.add_argument("--min-floor-kl-p99", type=float, default=1e-3,
                   help="the KL 99th-percentile floor assumed when the measured one is smaller, nats (default 1e-3)")
    p.add_argument("--min-floor-top1-disagreement", type=float, default=2e-3,
                   help="the top-1 disagreement floor assumed when the measured one is smaller (default 0.002)")
    add_task_policy_arguments(p)


def gate_policy_from_args(args: argparse.Namespace) -> GatePolicy:
    return GatePolicy(
        fidelity=FidelityPolicy(
            noise_factor=args.noise_factor,
            min_floor_kl_mean=args.min_floor_kl_mean,
            min_floor_kl_p99=args.min_floor_kl_p99,
            min_floor_top1_disagreement=args.min_floor_top1_disagreement,
        ),
        tasks=task_policy_from_args(args),
    )
