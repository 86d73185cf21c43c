"""How much the HTTP server costs: decode (and prefill) tok/s through it over a direct exllamav3 Generator.

Both sides run the same checkpoint and config in fresh processes, alternating (direct, server,
direct, server) so drift hits both; each side times a greedy, fixed-length job and rates it with
bench's one decode formula (`bench.records.decode_tok_per_s`: tokens after the first two over the
span from the second arrival to the last). The server side is read through the project's one
client (`openai_client`) and timed by bench (`bench.timing`). The ratio of medians is printed; a
failed or unrateable run stops the check (OverheadError) instead of giving a number.

With --prefill-tokens N each side also prefills unique N-token prompts (one new token each) and
the engine's own prefill time is compared: a server-side prefill below the direct generator's on
the same GPU is the server's fault; both below a published number is the GPU's.

Usage:
    python -m benchmarks.overhead --model DIR [--config FILE] [--vram-limit 24GiB] [--prompt-tokens 1024]
                               [--new-tokens 256] [--prefill-tokens 8192] [--repeats 5] [--rounds 2]
                               [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from bench.records import RequestResult, RequestSpec, decode_tok_per_s
from bench.timing import timed_stream
from openai_client import Client, ClientError, Endpoint
from serving.config import ServingConfig, engine_for_checkpoint
from serving.units import parse_bytes
from tuner_errors import TunerError

__all__ = ["OverheadError", "main"]


class OverheadError(TunerError, RuntimeError):
    """A run could not be rated (it failed, was too short, or hit the prefix cache): no ratio is given."""


def _prompt(codec, n_tokens: int, salt: int) -> list[int]:
    """Natural text, salted at the start so no two runs share a prefix-cache page."""
    text = resources.files("serving.synthetic").joinpath("corpus.txt").read_text()
    ids = codec.encode(f"Run {salt}. " + text * (n_tokens // 500 + 2))
    return ids[:n_tokens]


def _direct(args: argparse.Namespace) -> list[dict]:
    """In this process: load the engine without a server and time Generator.iterate() directly."""
    import torch
    from exllamav3 import Job
    from exllamav3.generator.sampler import ArgmaxSampler

    from serving.exllamav3_engine import Exl3Engine
    from serving.textcodec import TextCodec

    config = ServingConfig.from_json(
        args.config.read_text() if args.config else "{}", default_engine_name="exllamav3"
    )
    import os

    os.environ.update(config.env)
    codec = TextCodec(args.model)
    engine = Exl3Engine(args.model, config.args, codec, env=config.env, vram_limit_bytes=args.vram_limit)
    engine.check_surface()
    engine._load()
    engine._warmup()

    def run(ids: list[int], max_new_tokens: int) -> tuple[list[float], dict]:
        """One greedy job to its end: when each token arrived, and the job's final result."""
        engine.generator.enqueue(Job(input_ids=torch.tensor([ids]), max_new_tokens=max_new_tokens,
                                     sampler=ArgmaxSampler(), stop_conditions=[]))
        stamps, final = [], None
        while engine.generator.num_remaining_jobs():
            for result in engine.generator.iterate():
                if result.get("stage") == "streaming" and result.get("token_ids") is not None:
                    stamps.extend([time.perf_counter()] * result["token_ids"].numel())
                if result.get("eos"):
                    final = result
        return stamps, final

    runs = []
    for r in range(args.repeats):
        stamps, final = run(_prompt(codec, args.prompt_tokens, salt=args.salt * 1000 + r), args.new_tokens)
        itl_s = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
        runs.append({"tokens": len(stamps), "decode_span_s": sum(itl_s[1:]),
                     "decode_tok_per_s": decode_tok_per_s(len(stamps), itl_s),
                     "engine_decode_s": final["time_generate"], "engine_new_tokens": final["new_tokens"]})
    for r in range(args.repeats if args.prefill_tokens else 0):
        _, final = run(_prompt(codec, args.prefill_tokens, salt=args.salt * 1000 + _PREFILL_SALT + r), 1)
        runs.append({"prefill_tokens": final["prompt_tokens"], "cached_tokens": final["cached_tokens"],
                     "engine_prefill_s": final["time_prefill"]})
    return runs


def _through_server(args: argparse.Namespace, config: ServingConfig, salt: int, log_dir: Path) -> list[dict]:
    from serving.launcher import LaunchSpec, free_port, launch
    from serving.textcodec import TextCodec

    codec = TextCodec(args.model)
    spec = LaunchSpec(
        model_dir=args.model,
        config=config,
        port=free_port(),
        log_path=log_dir / f"server-{salt}.log",
        vram_limit_bytes=args.vram_limit,
        startup_timeout_s=900,
    )
    runs = []
    with launch(spec) as server, Client(Endpoint(url=server.url), timeout_s=600) as client:
        for r in range(args.repeats):
            ids = _prompt(codec, args.prompt_tokens, salt=salt * 1000 + r)
            body = {
                "prompt": ids,
                "max_tokens": args.new_tokens,
                "temperature": 0,
                "ignore_eos": True,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            result = _measured(timed_stream(client, _spec(len(ids), args.new_tokens), body, "/v1/completions"))
            runs.append(
                {
                    "tokens": result.completion_tokens,
                    "decode_span_s": result.decode_span_s,
                    "decode_tok_per_s": result.decode_tok_per_s_client,
                    "engine_decode_s": result.server_decode_s,
                    "engine_new_tokens": result.completion_tokens,
                }
            )
        for r in range(args.repeats if args.prefill_tokens else 0):
            ids = _prompt(codec, args.prefill_tokens, salt=salt * 1000 + _PREFILL_SALT + r)
            body = {"prompt": ids, "max_tokens": 1, "temperature": 0, "ignore_eos": True}
            try:
                usage = client.post_json("/v1/completions", body)["usage"]
            except ClientError as exc:
                raise OverheadError(f"a prefill request failed: {exc}") from exc
            runs.append(
                {
                    "prefill_tokens": usage["prompt_tokens"],
                    "cached_tokens": usage["prompt_tokens_details"]["cached_tokens"],
                    "engine_prefill_s": usage["timings"]["prefill_s"],
                }
            )
    return runs


def _spec(prompt_tokens: int, new_tokens: int) -> RequestSpec:
    return RequestSpec(purpose="measure", point=f"decode@{prompt_tokens}", prompt_kind="mixed",
                       target_prompt_tokens=prompt_tokens, prompt_chars=0, prompt_sha256="", max_tokens=new_tokens,
                       ignore_eos=True)


def _measured(result: RequestResult) -> RequestResult:
    """A decode run with a rate and the server's decode time, or a loud failure (no rate is invented)."""
    if not result.ok:
        raise OverheadError(f"a decode request through the server failed: {result.error}")
    if result.decode_tok_per_s_client is None or result.server_decode_s is None:
        raise OverheadError("the server's stream gave no decode rate (fewer than three tokens) or no usage.timings")
    return result


_PREFILL_SALT = 500  # prefill prompts never share a salt (so a cache page) with the decode prompts


def _rate(runs: list[dict]) -> float:
    """Median decode tok/s over the runs, each rated by bench's formula (`decode_tok_per_s`)."""
    rates = [r["decode_tok_per_s"] for r in runs if "tokens" in r]
    if None in rates:
        raise OverheadError("a decode run had fewer than three tokens: raise --new-tokens")
    return statistics.median(rates)


def _prefill_rate(runs: list[dict]) -> float | None:
    """Median engine-timed prefill tok/s; a run that hit the prefix cache would flatter it, so it fails loudly."""
    runs = [r for r in runs if "engine_prefill_s" in r]
    if not runs:
        return None
    if any(r["cached_tokens"] for r in runs):
        raise OverheadError(f"prefill prompts hit the prefix cache: {[r['cached_tokens'] for r in runs]}")
    return statistics.median(r["prefill_tokens"] / r["engine_prefill_s"] for r in runs)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.overhead", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--config", type=Path)
    parser.add_argument("--vram-limit", type=parse_bytes)
    parser.add_argument("--prompt-tokens", type=int, default=1024)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument(
        "--prefill-tokens", type=int, default=0, help="also compare prefill at this length (0: no)"
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--direct", action="store_true", help=argparse.SUPPRESS)  # child mode
    parser.add_argument("--salt", type=int, default=0, help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except TunerError as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ValueError) else 1


def _run(args: argparse.Namespace) -> int:
    if args.direct:
        print(json.dumps(_direct(args)))
        return 0
    config = ServingConfig.from_json(
        args.config.read_text() if args.config else "{}", default_engine_name=engine_for_checkpoint(args.model)
    )
    if config.engine != "exllamav3":
        print(
            "the overhead benchmark compares against a direct exllamav3 Generator; use the exllamav3 engine",
            file=sys.stderr,
        )
        return 2
    direct_runs, server_runs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            cmd = [
                sys.executable,
                "-m",
                "benchmarks.overhead",
                "--direct",
                "--model",
                str(args.model),
                "--prompt-tokens",
                str(args.prompt_tokens),
                "--new-tokens",
                str(args.new_tokens),
                "--prefill-tokens",
                str(args.prefill_tokens),
                "--repeats",
                str(args.repeats),
                "--salt",
                str(2 * round_),
            ]
            if args.config:
                cmd += ["--config", str(args.config)]
            if args.vram_limit:
                cmd += ["--vram-limit", str(args.vram_limit)]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True)
            direct_runs += json.loads(out.stdout.strip().splitlines()[-1])
            server_runs += _through_server(args, config, 2 * round_ + 1, Path(tmp))
    direct, server = _rate(direct_runs), _rate(server_runs)
    direct_prefill, server_prefill = _prefill_rate(direct_runs), _prefill_rate(server_runs)
    result = {
        "model": str(args.model),
        "config_digest": config.digest,
        "prompt_tokens": args.prompt_tokens,
        "new_tokens": args.new_tokens,
        "prefill_tokens": args.prefill_tokens,
        "repeats": args.repeats,
        "rounds": args.rounds,
        "direct_decode_tok_per_s": direct,
        "server_decode_tok_per_s": server,
        "ratio": server / direct,
        "direct_prefill_tok_per_s": direct_prefill,
        "server_prefill_tok_per_s": server_prefill,
        "prefill_ratio": server_prefill / direct_prefill if direct_prefill else None,
        "direct_runs": direct_runs,
        "server_runs": server_runs,
    }
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    print(f"decode tok/s: direct generator {direct:.2f}, through HTTP server {server:.2f}")
    print(f"ratio: {server / direct:.4f}")
    if direct_prefill:
        print(
            f"prefill tok/s @{args.prefill_tokens}: direct generator {direct_prefill:,.0f}, "
            f"through HTTP server {server_prefill:,.0f}, ratio {server_prefill / direct_prefill:.4f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
