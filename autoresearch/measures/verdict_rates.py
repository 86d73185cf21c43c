"""The speed verdict's error rates at the two noises it is designed for, printed in one run.

The project's own round (autoresearch.measures.faster.sequential_round, what the finalists' stage runs) on launches
drawn like a real study's, many times: the real Qwen2.5-Coder-0.5B's noise on the H200 (the README's "On your GPU"
command: the offline suite's five points and request mix from examples/real-0.5b-night/first-try, decode launch-to-
launch spread 8-14% with runs inside a launch spreading 2-9% and rg-logic's 2-token answers leaving 3 valid runs of
6, prefill bimodal: one launch in five near 107K tok/s, the rest near 60K, runs spreading ~25%), and the same
workload at the 27B shape's measured floors (two launches' relative difference: decode 3%, 2%, 1%, 0.4%, prefill
5.3%; a floor f is a launch-to-launch sd of about f / 1.128). tests/autoresearch/test_speed_verdict_rates.py
asserts the issue's bounds on the same draws.

Usage:
    python -m autoresearch.measures.verdict_rates [--rounds 1000]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics

from autoresearch.measures.error_rates import crown_rates
from autoresearch.measures.faster import RULE, VerdictRule
from autoresearch.measures.launch_stats import Reading
from autoresearch.measures.request_time import RequestMix

__all__ = ["MIX", "RATES", "main", "prefill_for", "q27_floors", "real_05b", "uniform"]

MIX = RequestMix.from_dict({"kinds": [
    {"kind": "rg-math", "context_tokens": 1024, "weight": 0.25, "prompt_tokens": 1029.5, "answer_tokens": 59.5},
    {"kind": "rg-logic", "context_tokens": 1024, "weight": 0.25, "prompt_tokens": 1009.0, "answer_tokens": 2.0},
    {"kind": "rg-math", "context_tokens": 8192, "weight": 0.25, "prompt_tokens": 8170.0, "answer_tokens": 35.0},
    {"kind": "rg-logic", "context_tokens": 8192, "weight": 0.25, "prompt_tokens": 8153.0, "answer_tokens": 2.0}]})
PREFILL = "prefill_tok_per_s_server@8192"
MATH_1K, MATH_8K, LOGIC_1K, LOGIC_8K = (f"decode_tok_per_s_client@{c}/{k}" for k, c in
                                        (("rg-math", 1024), ("rg-math", 8192), ("rg-logic", 1024), ("rg-logic", 8192)))
RATES = {PREFILL: 60_000.0, MATH_1K: 340.0, MATH_8K: 350.0, LOGIC_1K: 375.0, LOGIC_8K: 350.0}


def real_05b(gains: dict[str, dict[str, float]] | None = None):
    """Launches like the real 0.5B study's: each point's launch median from its runs (6, or 3 valid)."""
    gains = gains or {}
    launch_sd = {MATH_1K: 0.14, MATH_8K: 0.10, LOGIC_1K: 0.12, LOGIC_8K: 0.08}
    run_sd = {MATH_1K: 0.05, MATH_8K: 0.02, LOGIC_1K: 0.09, LOGIC_8K: 0.06}
    valid_runs = {MATH_1K: 6, MATH_8K: 6, LOGIC_1K: 3, LOGIC_8K: 3}

    def launch(config: str, rng: random.Random) -> Reading:
        g = gains.get(config, {})
        points = {}
        for m in launch_sd:
            mu = math.log(RATES[m] * g.get(m, 1.0)) + rng.gauss(0, launch_sd[m])
            points[m] = math.exp(statistics.median(rng.gauss(mu, run_sd[m]) for _ in range(valid_runs[m])))
        mode = 107_000.0 if rng.random() < 0.2 else 60_000.0
        mu = math.log(mode * g.get(PREFILL, 1.0)) + rng.gauss(0, 0.08)
        points[PREFILL] = math.exp(statistics.median(rng.gauss(mu, 0.25) for _ in range(6)))
        return Reading(cost=MIX.time_s(points), points=points)
    return launch


def q27_floors(gains: dict[str, dict[str, float]] | None = None):
    """Launches at the 27B shape's measured floors (log-normal launch to launch)."""
    gains = gains or {}
    sd = {MATH_1K: 0.03 / 1.128, MATH_8K: 0.02 / 1.128, LOGIC_1K: 0.01 / 1.128, LOGIC_8K: 0.004 / 1.128,
          PREFILL: 0.053 / 1.128}

    def launch(config: str, rng: random.Random) -> Reading:
        g = gains.get(config, {})
        points = {m: RATES[m] * g.get(m, 1.0) * math.exp(rng.gauss(0, sd[m])) for m in RATES}
        return Reading(cost=MIX.time_s(points), points=points)
    return launch


def uniform(speedup: float) -> dict[str, float]:
    return dict.fromkeys(RATES, speedup)


def prefill_for(request_speedup: float) -> float:
    """The prefill gain alone that makes the workload's request time `request_speedup` faster."""
    base = MIX.time_s(RATES)
    lo, hi = 1.0, 100.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if base / MIX.time_s({**RATES, PREFILL: RATES[PREFILL] * mid}) < request_speedup else (lo, mid)
    return hi



def _rates(draw, rule: VerdictRule, rounds: int):
    return crown_rates(draw, ["A", "B"], history=2, rule=rule, rounds=rounds, seed=45)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1000)
    args = parser.parse_args(argv)
    win = prefill_for(1.33)
    rows = [
        ("A/A, two finalists (any crowned)", {}, RULE, "crowned+"),
        ("prefill x2.4, at most 5 launches a side", {"A": {PREFILL: 2.4}}, RULE.with_most(5), "crowned"),
        ("uniform 1.10x, at most 5 launches a side", {"A": uniform(1.10)}, RULE.with_most(5), "crowned"),
        ("uniform 1.20x", {"A": uniform(1.20)}, RULE, "crowned"),
        ("1.33x win, rg-math@1K decode 3% slower", {"A": {PREFILL: win, MATH_1K: 0.97}}, RULE, "vetoed"),
        ("1.33x win, rg-math@1K decode 10% slower", {"A": {PREFILL: win, MATH_1K: 0.90}}, RULE, "vetoed"),
        ("1.33x win, prefill 10% slower (decode 1.5x)", {"A": {**dict.fromkeys((MATH_1K, MATH_8K, LOGIC_1K, LOGIC_8K),
                                                                               1.5), PREFILL: 0.90}}, RULE, "vetoed"),
    ]
    print(f"{'scenario':48s} {'noise':12s} {'share':>7s} {'launches':>9s}")
    for name, gains, rule, what in rows:
        for noise, label in ((real_05b, "real 0.5B"), (q27_floors, "27B floors")):
            got = _rates(noise(gains), rule, args.rounds)
            share = got["A"].crowned + got["B"].crowned if what == "crowned+" else getattr(got["A"], what.rstrip("+"))
            print(f"{name:48s} {label:12s} {share:7.1%} {got['A'].launches:9.2f}  ({what.rstrip('+')})")
    for gain, label in (({PREFILL: 2.4}, "prefill x2.4"), (uniform(1.2), "uniform 1.20x")):
        for noise, nlabel in ((real_05b, "real 0.5B"), (q27_floors, "27B floors")):
            power = [_rates(noise({"A": gain}), RULE.with_most(n), args.rounds // 2)["A"].crowned for n in (2, 3, 5, 8)]
            print(f"power by most launches 2/3/5/8, {label}, {nlabel}: " + " / ".join(f"{p:.0%}" for p in power))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
