"""Everything a run is told, parsed once from the CLI into one frozen object.

The embedded default (no --model) is a complete small study on 2 CPU cores: the tiny synthetic
model on the transformers engine, the offline suite, short ladders. With a model the defaults are
the GPU ones: exllamav3, the chosen suite, 8K prefill and 1K/8K decode.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import secrets
import socket
from dataclasses import dataclass, field
from pathlib import Path

from autoresearch.ground.errors import PlanError
from autoresearch.ground.model_source import ResolvedModel
from autoresearch.ground.servers import ServerSpec
from bench import BenchPlan, BenchResult, Workload, run_bench
from eval import GatePolicy, ProbeSetConfig
from openai_client import Endpoint

__all__ = ["DriftPolicy", "RunPlan", "bench_plan_from_flags", "default_bench_plan", "default_probe_config", "study_name_for", "worker_gone", "worker_name"]

OBJECTIVES = ("decode_tok_per_s", "prefill_tok_per_s")
# How the objectives are read from bench (autoresearch.measures.objectives): a study keeps one definition.
_DECODE_MIN_TOKENS = 32  # the loop's shortest run that times decode (see _engine_bench_plan)
_BENCH_TIME_S = 10.0  # the measured runs' time on a GPU, split among the points (see _engine_bench_plan)
OBJECTIVE_DEFINITION = "v2: decode client-timed, prefill server-timed, every planned point required"


@dataclass(frozen=True)
class DriftPolicy:
    """When the baseline is re-measured during the search; None turns a rule off, both None the check."""

    every_trials: int | None = 5
    every_minutes: float | None = 30.0

    def __post_init__(self) -> None:
        if self.every_trials is not None and self.every_trials < 1:
            raise PlanError(f"--drift-every-trials must be >= 1 (0 turns the rule off), got {self.every_trials}")
        if self.every_minutes is not None and not self.every_minutes > 0:
            raise PlanError(f"--drift-every-minutes must be > 0 (0 turns the rule off), got {self.every_minutes}")

    @property
    def enabled(self) -> bool:
        return self.every_trials is not None or self.every_minutes is not None

    def describe(self) -> str:
        if not self.enabled:
            return "off (--no-drift-check): the baseline's first reading is trusted for the whole study"
        rules = ([f"every {self.every_trials} trials"] if self.every_trials else []) + \
                ([f"every {self.every_minutes:g} minutes"] if self.every_minutes else [])
        return "a fresh launch of the baseline " + " or ".join(rules) + ", and once more right after drift is seen"


def default_bench_plan(engine: str, workload: Workload | None = None) -> BenchPlan:
    """The engine's ladders; decode on `workload`'s kinds when one is given, else on bench's math corpus."""
    plan = _engine_bench_plan(engine)
    if workload is None:
        return plan
    return dataclasses.replace(plan, decode_kinds=workload.kind_names, workload=workload.summary())


def _engine_bench_plan(engine: str) -> BenchPlan:
    # Decode times the model's own answers (decode_until "eos"): past its answer a model writes text that
    # drafting predicts far better than an answer, so a fixed length flatters a drafted configuration.
    # A run times decode from 32 tokens on: the real 0.5B's rg-logic answers (2 tokens) left half its runs
    # invalid and the rest timed on one gap; a point whose answers are shorter is timed on 32-token runs past
    # them (bench.ladder says so once; request time weighs the kind by its own answers). On a GPU each point
    # repeats until its interval meets its target and its runs stop trending, or its share of 10 s is spent:
    # the 0.5B's runs take a tenth of a second, the 27B's seconds (it stops at min_repeats).
    if engine == "transformers":  # 2 CPU cores: short ladders, few repeats
        return BenchPlan(prefill_tokens=(256,), decode_context_tokens=(128,), decode_kinds=("math",),
                         decode_tokens=24, decode_until="eos", decode_min_tokens=4, min_repeats=3,
                         max_repeats=5, warmup_requests=1,
                         gpu_index=None, prefill_target_rel_ci=0.10, decode_target_rel_ci=0.05)
    return BenchPlan(prefill_tokens=(8192,), decode_context_tokens=(1024, 8192), decode_kinds=("math",),
                     decode_tokens=128, decode_until="eos", decode_min_tokens=_DECODE_MIN_TOKENS, min_repeats=3,
                     max_repeats=6, bench_time_s=_BENCH_TIME_S)


def bench_plan_from_flags(engine: str, workload: Workload | None = None, *, stored_decode_until: str | None = None,
                          **flags) -> BenchPlan:
    """The engine's plan with the --bench-* flags given (`flags`: BenchPlan fields, None where not given).

    Without --bench-decode-until a stored study keeps the mode it was measured with (`stored_decode_until`,
    autoresearch.ground.stored_study): a study made when fixed-length decode was the default resumes as it began."""
    plan = default_bench_plan(engine, workload)
    changes = {k: v for k, v in flags.items() if v is not None}
    if changes.get("decode_until") is None and stored_decode_until is not None:
        changes["decode_until"] = stored_decode_until
    if "max_repeats" in changes:
        changes["min_repeats"] = min(plan.min_repeats, changes["max_repeats"])
    tokens, until = changes.get("decode_tokens", plan.decode_tokens), changes.get("decode_until", plan.decode_until)
    if until == "eos" and tokens < plan.decode_min_tokens:
        raise PlanError(f"--bench-decode-tokens {tokens}: timing the model's own answers (--bench-decode-until eos, "
                        f"the default) sets aside runs shorter than {plan.decode_min_tokens} tokens; give "
                        f"{plan.decode_min_tokens} or more, or --bench-decode-until length")
    try:
        return dataclasses.replace(plan, **changes)
    except ValueError as exc:  # BenchConfigError names the field
        raise PlanError(str(exc)) from exc


def default_probe_config(engine: str) -> ProbeSetConfig:
    if engine == "transformers":
        return ProbeSetConfig(continuation_tokens=16, long_context_tokens=(512,), long_continuation_tokens=8)
    # The longest probe must fit the smallest cache a study allows (pin cache_tokens to the workload's).
    return ProbeSetConfig(long_context_tokens=(4000, 11000))  # nominal; ~10K and ~27K tokens of a synthetic tokenizer


def worker_name() -> str:
    """This process as the study's records name it: host:pid (several workers may share one study)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def worker_gone(name: str) -> bool:
    """Whether the worker `name` (host:pid) is known to be dead: a process of this host that no longer
    exists. A worker on another host cannot be checked from here and is never called gone."""
    host, _, pid = name.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, under another user
        return False
    return False


def study_name_for(suite: str, engine: str, manifest_hash: str) -> str:
    """Encodes what must not change within one study: suite, engine, model, objective layout."""
    return f"{suite}-{engine}-{manifest_hash[:10]}-dec+pre-v1"


@dataclass(frozen=True, kw_only=True)
class RunPlan:
    model: ResolvedModel
    engine: str
    suite: str
    study_name: str
    storage_url: str
    workdir: Path  # server logs, configs, suite run folders
    results_md: Path
    trials: int | None = None  # total COMPLETE + PRUNED trials in the study, baseline included
    hours: float | None = None
    vram_bytes: int | None = None  # the budget; None: no memory check (CPU engine)
    emulate_vram: bool = False  # also cap the server's GPU memory at vram_bytes (a 3090 on a bigger GPU)
    host_memory_limit_bytes: int | None = None  # cap each server's data segment: emulate a smaller CPU machine
    port: int = 0  # 0: a free port per launch; else pinned (--port N)
    seed: int = 0
    bench_plan: BenchPlan = field(default_factory=lambda: default_bench_plan("exllamav3"))
    workload: Workload | None = None  # the tasks decode is measured on (bench_plan.workload summarises it)
    probe_config: ProbeSetConfig = field(default_factory=lambda: default_probe_config("exllamav3"))
    gate_policy: GatePolicy = field(default_factory=GatePolicy)
    suite_overrides: dict = field(default_factory=dict)  # e.g. {"limit": 2, "max_tokens": 64} for the offline suite
    pinned: dict = field(default_factory=dict)  # knobs held fixed, e.g. {"cache_tokens": 32768}
    enqueued: tuple = ()  # baseline changes to try first, e.g. ({"max_chunk_size": 4096},)
    levers: bool = True  # then the catalog's levers, one change each (SearchSpace.levers), before the sampler
    baseline_changes: dict = field(default_factory=dict)  # the baseline = defaults + these, e.g. {"EXL3_INT8_GEMV": 0}
    dominated_margin_rel: float = 0.05  # stop a trial this much slower than a front member on both objectives
    finalists: int = 2
    finalist_launches: int = 2  # launches a side before the verdict's first look (the least the stage is reserved)
    finalist_max_launches: int = 8  # launches a side at most (fewer where the night's clock runs out)
    min_speedup: float = 1.02  # the smallest request-time speed-up worth a change (autoresearch.measures.faster)
    guard_tolerance: float = 0.03  # a point shown slower than this vetoes
    startup_timeout_s: float = 900.0
    draft_model: ResolvedModel | None = None  # the user's drafter (--draft-model): opens the draft_model/dflash knobs
    heartbeat_s: int = 10
    grace_s: int = 60
    drift: DriftPolicy = field(default_factory=DriftPolicy)  # when the baseline is re-measured (autoresearch.checks.drift)
    storage_shown: str | None = None  # the database a read-only copy (storage_url) was made of
    minimize: bool = False  # after confirming a champion, remove its changes that do not keep its speed
    minimize_launches: int = 2  # fresh launches of each configuration per minimization round
    minimize_max_launches: int | None = None  # cap on the minimization's launches (None: its own bound)
    task_tier_scope: str = "finalists"  # who the task tier judges (autoresearch.night.forecast.SCOPES)
    stated_rates: dict = field(default_factory=dict)  # the night plan's rates the user stated (autoresearch.night_plan)
    rank_by: str = "time"  # --rank-by: what ranks best so far, finalists, champion (autoresearch.ground.ranked_by.RANK_BY)

    @property
    def storage_label(self) -> str:
        """The database as the user named it (reports say where their numbers live)."""
        return self.storage_shown or self.storage_url

    def __post_init__(self) -> None:
        if self.trials is not None and self.trials < 1:
            raise PlanError(f"--trials must be >= 1, got {self.trials}")
        if not 0 <= self.port <= 65535:
            raise PlanError(f"--port {self.port}: a TCP port is 1-65535 (0, the default: a free one per launch)")
        if self.hours is not None and self.hours <= 0:
            raise PlanError(f"--hours must be > 0, got {self.hours}")
        if self.trials is None and self.hours is None:
            raise PlanError("give --trials N or --hours H (or both): the loop needs a stopping rule")
        if not re.fullmatch(r"[\w.+-]{1,200}", self.study_name):
            raise PlanError(f"--study {self.study_name!r}: use letters, digits and . _ + - only")
        if self.minimize_launches < 1 or (self.minimize_max_launches is not None and self.minimize_max_launches < 1):
            raise PlanError("--minimize-launches and --minimize-max-launches must be >= 1")
        if self.finalists < 1:
            raise PlanError("--finalists must be >= 1")
        if not 2 <= self.finalist_launches <= self.finalist_max_launches:
            raise PlanError(f"--finalist-launches {self.finalist_launches} and --finalist-max-launches "
                            f"{self.finalist_max_launches}: need 2 <= first <= most (a launch-to-launch spread needs "
                            "two launches a side)")
        if not (self.min_speedup >= 1.0 and 0.0 <= self.guard_tolerance < 1.0):
            raise PlanError(f"--min-speedup {self.min_speedup} and --guard-tolerance {self.guard_tolerance}: need "
                            "a speed-up >= 1 and a tolerance in [0, 1)")
        if self.rank_by not in ("time", "energy"):
            raise PlanError(f"--rank-by {self.rank_by!r}: time or energy")
        if self.rank_by == "energy" and self.bench_plan.gpu_index is None:
            raise PlanError(f"--rank-by energy needs the GPU's energy readings (NVML); the {self.engine} engine's "
                            "bench reads no GPU")
        named = self.bench_plan.workload["sha256"] if self.bench_plan.workload else None
        if self.workload is not None and named != self.workload.sha256:
            raise PlanError("the bench plan names another workload than the one given")

    @property
    def study_dir(self) -> Path:
        return self.workdir / self.study_name

    @property
    def server_spec(self) -> ServerSpec:
        """Every launch of this study (trials, drift checks, tasks, finalists, minimization) runs this way."""
        return ServerSpec(model_dir=self.model.path, log_dir=self.study_dir / "logs", pid_dir=self.study_dir / "servers",
                          port=self.port, vram_limit_bytes=self.vram_bytes if self.emulate_vram else None,
                          host_memory_limit_bytes=self.host_memory_limit_bytes, startup_timeout_s=self.startup_timeout_s)

    def fresh_bench(self, server) -> BenchResult:
        """This study's bench on `server`, salted anew: no prompt of an earlier run may be found in any cache.

        Raises:
            BenchError, ClientError: from bench, unchanged.
        """
        plan = dataclasses.replace(self.bench_plan, salt=secrets.token_hex(4))
        return run_bench(plan, Endpoint(url=server.url), workload=self.workload)

    @property
    def measured_settings(self) -> dict[str, object]:
        """Settings that change what a trial measures, by the flag that sets them: a resumed study refuses
        any change of them (autoresearch.ground.study), naming the flag, the stored value and the new one.

        In the key instead (the study's identity: model, engine, suite, bench plan and workload, objective
        definition, baseline, gate, drafter). Neither: what only decides which trials run next or how
        long (--trials, --hours, --seed, --enqueue, --port, --finalists, --finalist-launches, --heartbeat,
        --grace, the startup timeout, --task-tier-scope, the night plan's rate flags). --pin changes the baseline and the search space; --vram and
        --emulate-vram which configurations fit and what a server may use; --host-memory-limit the same
        for the CPU engine; the probe set the fidelity reference; the suite flags the tasks the baseline
        answered (concurrency too: batching can change the numerics). --rank-by is kept apart, in the study's
        own `ranked_by`: autoresearch.ground.ranked_by.settle_ranked_by refuses another on resume."""
        overrides = self.suite_overrides
        return {
            "--pin": dict(sorted(self.pinned.items())),
            "--vram": self.vram_bytes,
            "--emulate-vram": self.emulate_vram,
            "--host-memory-limit": self.host_memory_limit_bytes,
            "the probe set": dataclasses.asdict(self.probe_config),
            "--suite-limit": overrides.get("limit"),
            "--suite-max-tokens": overrides.get("max_tokens"),
            "--suite-tasksets": list(overrides["tasksets"]) if overrides.get("tasksets") else None,
            "--suite-concurrency": overrides.get("max_concurrent"),
        }

    @property
    def key(self) -> str:
        """What a resumed run must share with the stored study: its identity (see `measured_settings`)."""
        text = f"{self.model.manifest_hash}|{self.engine}|{self.suite}|{self.bench_plan.digest}|{OBJECTIVE_DEFINITION}"
        if self.baseline_changes:  # another baseline is another reference: never mix them in one study
            text += "|baseline:" + json.dumps(self.baseline_changes, sort_keys=True)
        if self.gate_policy != GatePolicy():  # nor decisions made under different gates
            text += "|gate:" + repr(self.gate_policy)
        if self.draft_model is not None:  # another drafter is another search space
            text += "|draft:" + self.draft_model.manifest_hash
        return hashlib.sha256(text.encode()).hexdigest()[:16]
