"""Two workers on one PostgreSQL study, asked to propose the same configuration at the same moment: it is
measured exactly once. Each worker is the real loop's pieces (its own Optuna RDB storage and
connections, its own trial runner); the sampler is fixed to one configuration (Optuna's
PartialFixedSampler), the launcher and bench are `fakes.FakeLauncher`, and a barrier starts both
workers' trials together. Several rounds, one configuration each, to meet several interleavings."""

from __future__ import annotations

import os
import threading
import uuid

import optuna
import pytest

from autoresearch.ground.db import ResultsDB
from autoresearch.ground.outcome import TrialOutcome
from autoresearch.ground.study import open_study
from autoresearch.night.progress import Progress
from autoresearch.trial.runner import TrialRunner
from eval import EvalStore

from .fakes import FakeLauncher
from .stage_env import StageEnv

pytestmark = [pytest.mark.postgres,
              pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")]  # PartialFixedSampler
URL = os.environ.get("AUTORESEARCH_TEST_POSTGRES_URL")
CHUNKS = (4096, 1024, 512)  # one round each


@pytest.mark.skipif(not URL, reason="set AUTORESEARCH_TEST_POSTGRES_URL (.ci/postgres starts one)")
def test_two_workers_proposing_one_configuration_at_once_measure_it_once(tmp_path, small_model, monkeypatch):
    env = StageEnv.make(tmp_path, small_model, storage_url=URL, study_name=f"dup-{uuid.uuid4().hex[:8]}",
                        heartbeat_s=2, grace_s=30, levers=False)  # the sampler alone proposes; its study in URL
    env.baseline_done()  # before open_study: it enqueues a baseline only where none ran
    launcher = FakeLauncher().install(monkeypatch)
    workers = []
    for _ in range(2):  # each worker: its own storage, connections and runner, as two processes have
        study = open_study(env.plan, env.space)
        runner = TrialRunner(env.plan, env.space, ResultsDB(URL), EvalStore(URL),
                             Progress(study=env.plan.study_name, trials=None, hours=1.0, live=False))
        workers.append((study, runner))
    for chunk in CHUNKS:
        params = env.params({"max_chunk_size": chunk})
        barrier = threading.Barrier(2)
        errors: list[BaseException] = []

        def work(study: optuna.Study, runner: TrialRunner, params=params, barrier=barrier, errors=errors) -> None:
            try:
                study.sampler = optuna.samplers.PartialFixedSampler(params, optuna.samplers.RandomSampler(seed=0))
                barrier.wait()
                study.optimize(runner, n_trials=1, catch=())
            except BaseException as exc:  # noqa: BLE001 - reported below, in the test's thread
                errors.append(exc)

        threads = [threading.Thread(target=work, args=w, daemon=True) for w in workers]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not errors, errors
        digest = env.digest({"max_chunk_size": chunk})
        trials = [t for t in env.study.get_trials() if t.user_attrs.get("config_digest") == digest]
        assert len(trials) == 2 and all(t.state != optuna.trial.TrialState.RUNNING for t in trials), \
            [(t.number, t.state, t.user_attrs.get("outcome"), t.user_attrs.get("config_digest", "")[:8], digest[:8])
             for t in env.study.get_trials()]
        first, second = sorted(trials, key=lambda t: t.number)
        assert TrialOutcome.of(first) is not TrialOutcome.DUPLICATE, first.user_attrs
        assert TrialOutcome.of(second) is TrialOutcome.DUPLICATE and second.user_attrs["duplicate_of"] == first.number
        assert launcher.launched(digest) == 1, f"max_chunk_size {chunk}: measured {launcher.launched(digest)} times"
