"""A whole night of the loop (`autoresearch.loop.run`) on real parts, with a scripted clock.

Real: Optuna on SQLite, the trial runner's stages, the finalists' stage, the minimization and its gate, the
night plan, the clock, RESULTS.md. Test doubles, named as such, at the outside boundaries only:
- `ScriptedMachine` (tests.autoresearch.fakes.FakeLauncher): no process starts; each launch and bench takes
  the scripted seconds on `ScriptedClock` (`time.monotonic` for the loop), irregularly (launches differ);
  candidates that change the prefill chunk size are faster, the rest as fast as the baseline;
- the fidelity probes a fake server cannot answer: a reference and measurements at the noise floor, stored as
  the real capture stores them, each taking scripted seconds; the gate on them passes;
- `ScriptedTier`, the task suite's answers: the baseline's first answers and each judgment take scripted seconds
  (a judgment longer than the plan's estimate, as a walk that runs long), in chunks kept across calls of the
  loop as the real tier keeps its answers on disk, and every candidate passes;
- `ScriptedTicker`, the clock's autosave thread (autoresearch.night.clock.Ticker): it fires on the scripted
  clock, when the scripted seconds pass its period.

A kill -9 (`env.kill`): the hook raises `Killed`, which nothing in the loop catches, and from then on the dead
process writes nothing: the night's clock is not saved again (a real kill runs no `finally`).

Usage:
    env = NightEnv.make(tmp_path, small_model, monkeypatch, hours=2.0)
    code = env.run()
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import optuna

from autoresearch import loop
from autoresearch.champion import minimal_gate as minimal_gate_module
from autoresearch.ground.plan import DriftPolicy, RunPlan, default_bench_plan, default_probe_config
from autoresearch.ground.study import baseline_trial_params
from autoresearch.night import clock as clock_module
from autoresearch.trial import baseline_protocol
from autoresearch.trial import runner as trial_module
from eval import EvalStore
from eval.errors import MissingReference
from search_space import SpaceContext, build_space, config_from_params, read_model_info

from .fakes import FakeLauncher
from .stage_env import GIB, stored_measurement, stored_reference

MINIMIZING_HOURS = 3.0  # --hours long enough that the policy keeps the minimization and its gates (a quarter of it)
LAUNCH_S, BENCH_S, FIDELITY_S = 60.0, 120.0, 60.0  # what the plan is told (--launch-s ...), and about what they take


class Killed(BaseException):  # noqa: N818 - what kill -9 does to the loop: nothing after it runs
    pass


@dataclass
class ScriptedClock:
    """time.monotonic for the loop: seconds pass only when a scripted stage takes them; timers (the autosave's
    ScriptedTicker) fire at their due times as the seconds pass."""

    now: float = 1000.0
    timers: list[list] = field(default_factory=list)  # [period, next due, fn]

    def __call__(self) -> float:
        return self.now

    def take(self, seconds: float) -> None:
        end = self.now + seconds
        while self.timers and (due := min(self.timers, key=lambda t: t[1]))[1] <= end:
            self.now = due[1]
            due[1] += due[0]
            due[2]()
        self.now = end


class ScriptedTicker:
    """autoresearch.night.clock.Ticker's double: `fn` every `every_s` scripted seconds, not on a thread."""

    clock: ScriptedClock  # set by NightEnv

    def __init__(self, every_s: float, fn):
        self.timer = [every_s, self.clock.now + every_s, fn]

    def start(self) -> ScriptedTicker:
        self.clock.timers.append(self.timer)
        return self

    def stop(self) -> None:
        if self.timer in self.clock.timers:
            self.clock.timers.remove(self.timer)


class ScriptedMachine(FakeLauncher):
    """FakeLauncher whose launches and benches take scripted seconds; a changed prefill chunk size is faster."""

    def __init__(self, clock: ScriptedClock, baseline_digest: str, *, launch_s: float, bench_s: float, **kw):
        super().__init__(**kw)
        self.clock, self.baseline_digest, self.launch_s, self.bench_s = clock, baseline_digest, launch_s, bench_s

    def serve(self, *, config, **kw):
        self.clock.take(self.launch_s * (0.8 + 0.4 * (len(self.launches) % 3) / 2))  # 0.8, 1, 1.2 x in turn
        return super().serve(config=config, **kw)

    def run_bench(self, plan, endpoint, workload=None):
        self.clock.take(self.bench_s)
        config = self.launches[-1]
        faster = config.digest != self.baseline_digest and config.args.max_chunk_size != 2048
        self.speeds = {"*": (130.0, 1500.0) if faster else (100.0, 1000.0)}
        return super().run_bench(plan, endpoint, workload)


class ScriptedTier:
    """The task suite's answers (autoresearch.checks.judging.TierRunner's place): scripted seconds, every candidate
    passes. A judgment answers in CHUNKS; a chunk answered stays answered across calls of the loop (the real tier's
    answers on disk), so a judgment cut by a kill goes on where it stopped. `on_chunk(who, chunk)` runs before each."""

    CHUNKS = 6
    first_s = 300.0  # the baseline's first answers
    judgment_s = 600.0

    def __init__(self, clock: ScriptedClock, scale: float = 1.0):
        self.clock = clock
        self.first_s *= scale
        self.judged: list[str] = []
        self.answered: dict[str, int] = {}  # chunks answered, per judged candidate
        self.on_chunk = None

    def baseline_first(self, server, **_):
        self.clock.take(self.first_s)
        return SimpleNamespace(suite_run_id=None, tasksets=())

    def _answer(self, who: str) -> None:
        while self.answered.get(who, 0) < self.CHUNKS:
            if self.on_chunk is not None:
                self.on_chunk(who, self.answered.get(who, 0))
            self.clock.take(self.judgment_s / self.CHUNKS)
            self.answered[who] = self.answered.get(who, 0) + 1
        self.judged.append(who)

    def judge_pending(self, study, t):
        self._answer(f"trial {t.number}")
        return {"passed": True, "reasons": []}

    def judge(self, study, *, label, **_):
        self._answer(label)
        return SimpleNamespace(decision=SimpleNamespace(passed=True, reasons=[]), decision_id=None), None


@dataclass
class NightEnv:
    plan: RunPlan
    clock: ScriptedClock
    machine: ScriptedMachine
    tier: ScriptedTier
    fidelity_s: float = FIDELITY_S  # a fidelity measurement's scripted seconds
    stages: list[tuple[str, float, float | None, float | None]] = field(default_factory=list)  # at each stage's
    # start: name, scripted time, the study's ETA, the stage's ETA
    dead: bool = False  # killed (kill -9): nothing more is written

    @classmethod
    def make(cls, tmp_path: Path, model, monkeypatch, *, scale: float = 1.0, launch_s: float | None = None,
             bench_s: float | None = None, fidelity_s: float | None = None, **plan_kw) -> NightEnv:
        """`scale`: every scripted second times this (0.1: about the real 0.5B's launch, bench and fidelity);
        `launch_s`, `bench_s`, `fidelity_s`: one stage's scripted seconds instead."""
        launch_s, bench_s = launch_s or scale * LAUNCH_S, bench_s or scale * BENCH_S
        fidelity_s = fidelity_s or scale * FIDELITY_S
        kw = {"suite": "offline", "study_name": "night", "storage_url": f"sqlite:///{tmp_path / 'results.db'}",
              "suite_overrides": {"limit": 40, "max_tokens": 48}, "vram_bytes": 24 * GIB, "minimize": True,
              "minimize_launches": 1, "drift": DriftPolicy(every_trials=None, every_minutes=None),
              "stated_rates": {"launch_s": launch_s, "bench_s": bench_s, "fidelity_s": fidelity_s,
                               "decode_tok_s": 10.0 / scale, "prefill_tok_s": 200.0 / scale, "answer_tokens": 32.0},
              **plan_kw}
        plan = RunPlan(model=model, engine="exllamav3", workdir=tmp_path / "runs", results_md=tmp_path / "RESULTS.md",
                       bench_plan=default_bench_plan("exllamav3"), probe_config=default_probe_config("exllamav3"),
                       **kw)
        clock = ScriptedClock()
        monkeypatch.setattr(time, "monotonic", clock)
        space = build_space(SpaceContext(engine="exllamav3", model=read_model_info(model.path)))
        digest = config_from_params(space, baseline_trial_params(plan, space)).digest
        machine = ScriptedMachine(clock, digest, launch_s=launch_s, bench_s=bench_s).install(monkeypatch)
        tier = ScriptedTier(clock, scale)
        env = cls(plan=plan, clock=clock, machine=machine, tier=tier, fidelity_s=fidelity_s)
        env._install(monkeypatch)
        return env

    def _install(self, monkeypatch) -> None:
        store = EvalStore(self.plan.storage_url)

        def capture(url, probes, **_):
            self.clock.take(self.fidelity_s)
            try:
                return store.load_reference(self.plan.model.manifest_hash, _probes(self.plan))
            except MissingReference:
                return stored_reference(store, self.plan)

        def fidelity(url, reference, *, role, label, **_):
            self.clock.take(self.fidelity_s * 0.9)
            return stored_measurement(store, reference, role=role, label=label)

        passed = SimpleNamespace(decision=SimpleNamespace(passed=True, failed_stage=None, reasons=[]), decision_id=None)
        monkeypatch.setattr(baseline_protocol, "capture_reference", capture)
        for module in (trial_module, baseline_protocol):
            monkeypatch.setattr(module, "measure_fidelity", fidelity)
        monkeypatch.setattr(trial_module, "gate_candidate", lambda *a, **kw: passed)
        monkeypatch.setattr(minimal_gate_module, "measure_fidelity", fidelity)
        monkeypatch.setattr(minimal_gate_module, "gate_candidate", lambda *a, **kw: passed)
        monkeypatch.setattr(trial_module, "TierRunner", lambda *a, **kw: self.tier)
        monkeypatch.setattr("autoresearch.ground.preflight._check_engine", lambda engine: None)
        logging.getLogger("autoresearch").setLevel(logging.INFO)
        stage = loop.Progress.stage

        def seen(progress, name, **kw):
            stage(progress, name, **kw)
            self.stages.append((name, self.clock.now, progress.study_eta_s(), progress.stage_eta_s()))

        monkeypatch.setattr(loop.Progress, "stage", seen)
        ticker = type("Ticker", (ScriptedTicker,), {"clock": self.clock})
        monkeypatch.setattr(clock_module, "Ticker", ticker, raising=False)
        save = clock_module.NightClock.save

        def save_unless_dead(night_clock, study):
            if not self.dead:
                save(night_clock, study)

        monkeypatch.setattr(clock_module.NightClock, "save", save_unless_dead)

    def kill(self, where: str) -> None:
        """kill -9 here: raise what nothing catches, and write nothing from now on."""
        self.dead = True
        raise Killed(where)

    def run(self) -> int:
        self.dead = False  # a new process
        return loop.run(self.plan)

    def study(self) -> optuna.Study:
        return optuna.load_study(study_name=self.plan.study_name, storage=self.plan.storage_url)

    def replace(self, **changes) -> None:
        self.plan = dataclasses.replace(self.plan, **changes)


def _probes(plan: RunPlan) -> str:
    import hashlib

    return hashlib.sha256(plan.study_name.encode()).hexdigest()
