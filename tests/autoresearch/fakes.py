"""Test doubles at the loop's outside boundaries, named as such: the launcher and bench's measurements.

`FakeLauncher` stands in for `autoresearch.ground.servers.serve` (no process starts) and for `bench.run_bench`
(each launch's bench result is scripted from the speeds the test gives its configuration, and the GPU's
power draw where it gives one: its joules, as NVML's counter would give them), at every
launch of the study's `ServerSpec` and every `RunPlan.fresh_bench`: the trial runner and the
finalists' confirmation alike. Everything else is real: Optuna, the stage
machine, the results database, the memory model. A fake server answers nothing over HTTP (its URL
is a closed port), so a stage that talks to it (fidelity, the suite, /v1/server_info) fails as it
would against a server that does not answer.

Usage:
    launcher = FakeLauncher(speeds={"*": (100.0, 1000.0)}, watts={"*": 300.0}).install(monkeypatch)
    study.optimize(runner, n_trials=1)
    launcher.launches   # the configurations launched, in order
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from bench import BenchPlan, BenchResult, DecodePoint, PrefillPoint, RequestResult, RequestSpec, ServerProfile
from bench.runs import RequestEnergy
from serving.config import ServingConfig
from serving.errors import LaunchError

CLOSED_URL = "http://127.0.0.1:9"  # the discard port: nothing listens, a connection is refused at once
Speeds = tuple[float, float]  # (decode tok/s, prefill tok/s) at every point


def _spec(point: str, prompt_tokens: int, max_tokens: int, kind: str = "math") -> RequestSpec:
    return RequestSpec(purpose="measure", point=point, prompt_kind=kind, target_prompt_tokens=prompt_tokens,
                       prompt_chars=4 * prompt_tokens, prompt_sha256="0" * 64, max_tokens=max_tokens, ignore_eos=True)


def _energy(watts: float | None, latency_s: float, **intervals_s: float) -> RequestEnergy | None:
    """What bench.energy reads off NVML's counter at a steady `watts` (None: no GPU telemetry)."""
    if watts is None:
        return None
    return RequestEnergy(method="nvml_energy_counter", request_j=watts * latency_s, sampled_s=latency_s,
                         power_limit_w=350.0, **{k.replace("_s", "_j"): watts * v for k, v in intervals_s.items()})


def _prefill_run(tokens: int, rate: float, watts: float | None = None) -> RequestResult:
    seconds = tokens / rate
    return RequestResult(spec=_spec("prefill", tokens, 1), ok=True, started_at_unix_s=0.0, latency_s=seconds + 0.08,
                         ttft_s=seconds + 0.07, finish_s=seconds + 0.07, prompt_tokens=tokens, completion_tokens=1,
                         cached_tokens=0, server_prefill_s=seconds,
                         energy=_energy(watts, seconds + 0.08, prefill_s=seconds + 0.07))


def _decode_run(context: int, kind: str, output_tokens: int, rate: float | None, watts: float | None = None
                ) -> RequestResult:
    """`output_tokens` at `rate` tok/s, one per chunk; None: a run that ended short (invalid)."""
    gap = 1.0 / (rate or 100.0)
    return RequestResult(spec=_spec("decode", context, output_tokens, kind), ok=True, started_at_unix_s=0.0,
                         latency_s=1.0, ttft_s=0.1, finish_s=0.1 + gap * (output_tokens - 1),
                         itl_s=(gap,) * (output_tokens - 1), text_chunks=output_tokens, finish_reason="length",
                         prompt_tokens=context, completion_tokens=output_tokens, cached_tokens=0,
                         invalid_reason=None if rate else f"completion of 5 tokens, expected exactly {output_tokens}",
                         energy=_energy(watts, 1.0, decode_s=gap * (output_tokens - 2)))


def bench_result(plan: BenchPlan, decode: float | None, prefill: float, *, runs: int = 3,
                 watts: float | None = None) -> BenchResult:
    """A scripted bench result on `plan`'s points: every run at the given rates (decode None: unmeasured),
    drawing `watts` (None: no GPU telemetry, so no energy measured)."""
    profile = ServerProfile(url=CLOSED_URL, model="fake", api="chat", max_model_len=None, accepts_ignore_eos=True,
                            accepts_stream_options=True, reports_cached_tokens=True, reports_timings=True)
    return BenchResult(
        plan=plan.to_dict(), server=profile, gpu=None, host={}, started_at="", finished_at="", probes=(),
        prefill=tuple(PrefillPoint(target_tokens=t, warmups=(), settled=True,
                                   runs=tuple(_prefill_run(t, prefill, watts) for _ in range(runs)))
                      for t in plan.prefill_tokens),
        decode=tuple(DecodePoint(context_tokens=c, kind=k, output_tokens=plan.decode_tokens, warmups=(), settled=True,
                                 runs=tuple(_decode_run(c, k, plan.decode_tokens, decode, watts) for _ in range(runs)))
                     for c in plan.decode_context_tokens for k in plan.decode_kinds),
    )


@dataclass
class FakeServer:
    """What the loop reads of a launched server: its URL, and whether it died (`died`: the failure)."""

    config: ServingConfig
    url: str = CLOSED_URL
    died: LaunchError | None = None

    def check(self) -> LaunchError | None:
        return self.died


@dataclass
class FakeLauncher:
    """The launcher and bench, scripted per configuration digest ("*": any other configuration).

    `speeds[digest]` is (decode, prefill) tok/s, or a list of them, one per launch of that configuration;
    `fails[digest]` a LaunchError its launches raise; `dies[digest]` one its server reports after bench;
    `watts[digest]` the GPU's draw while it runs, or a list, one per launch (None: no energy reading);
    `wobble`: each launch's rates times a factor from it, in an order of the configuration's own (launches of one
    configuration differ, as real ones do, and not in step with another's; the default (1.0,) scripts exact
    rates)."""

    speeds: dict[str, Speeds | list[Speeds] | None] = field(default_factory=lambda: {"*": (100.0, 1000.0)})
    watts: dict[str, float | list[float | None] | None] = field(default_factory=lambda: {"*": None})
    fails: dict[str, LaunchError] = field(default_factory=dict)
    dies: dict[str, LaunchError] = field(default_factory=dict)
    launches: list[ServingConfig] = field(default_factory=list)
    benched: list[str] = field(default_factory=list)  # the digests bench measured, in order
    on_launch: Callable[[ServingConfig], None] | None = None
    wobble: tuple[float, ...] = (1.0,)

    def install(self, monkeypatch) -> FakeLauncher:
        monkeypatch.setattr("autoresearch.ground.servers.serve", self.serve)  # ServerSpec.launch calls it
        monkeypatch.setattr("autoresearch.ground.plan.run_bench", self.run_bench)  # RunPlan.fresh_bench calls it
        monkeypatch.setattr("autoresearch.trial.runner.server_info", lambda url: None)  # a fake server has no info
        return self

    @contextlib.contextmanager
    def serve(self, *, config: ServingConfig, **_: Any) -> Iterator[FakeServer]:
        self.launches.append(config)
        if self.on_launch is not None:
            self.on_launch(config)
        if config.digest in self.fails:
            raise self.fails[config.digest]
        yield FakeServer(config=config, died=self.dies.get(config.digest))

    def run_bench(self, plan: BenchPlan, endpoint, workload=None) -> BenchResult:
        config = self.launches[-1]
        self.benched.append(config.digest)
        launch = sum(d == config.digest for d in self.benched) - 1
        speeds = self.speeds.get(config.digest, self.speeds.get("*"))
        if isinstance(speeds, list):
            speeds = speeds[launch]
        watts = self.watts.get(config.digest, self.watts.get("*"))
        if isinstance(watts, list):
            watts = watts[launch]
        decode, prefill = speeds if speeds is not None else (None, 1000.0)
        w = self.wobble[(launch + int(config.digest[:6], 16)) % len(self.wobble)]
        return bench_result(dataclasses.replace(plan), decode * w if decode is not None else None, prefill * w,
                            watts=watts)

    def launched(self, digest: str) -> int:
        return sum(c.digest == digest for c in self.launches)
