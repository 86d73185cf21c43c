"""Two CPU workers on one study through PostgreSQL (Optuna's RDB storage): no trial runs twice.

Both start at once on an empty model cache, so they also race to generate the embedded model.
Each server runs one torch thread (`--pin threads=1`): two servers on two cores with torch's
default of one thread per core oversubscribe them, and OpenMP's spinning threads then slow both
by several times (this test once took over 10 minutes so).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import optuna
import pytest

from autoresearch.ground.db import ResultsDB

from .conftest import FAST, loop_env

pytestmark = [pytest.mark.slow, pytest.mark.postgres]
URL = os.environ.get("AUTORESEARCH_TEST_POSTGRES_URL")
WORKERS_TIMEOUT_S = 480  # about 2 minutes on an idle 2-core machine; pytest-timeout allows a minute more


@pytest.mark.skipif(not URL and not os.environ.get("CI"),
                    reason="set AUTORESEARCH_TEST_POSTGRES_URL (.ci/postgres starts one)")
@pytest.mark.timeout(WORKERS_TIMEOUT_S + 60)
def test_two_workers_share_one_study_without_duplicates(tmp_path):
    assert URL, "CI must start PostgreSQL (.ci/run does) and export AUTORESEARCH_TEST_POSTGRES_URL"
    study_name = f"shared-{uuid.uuid4().hex[:8]}"
    cmd = [sys.executable, "-m", "autoresearch", "--storage", URL, "--study", study_name, "--trials", "4",
           "--pin", "threads=1", *FAST]
    env = loop_env(tmp_path / "empty-cache")
    workers = []
    for i in range(2):
        cwd = tmp_path / f"worker{i}"
        cwd.mkdir()
        workers.append(subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True))
    deadline = time.monotonic() + WORKERS_TIMEOUT_S
    outputs = []
    for w in workers:
        try:
            outputs.append(w.communicate(timeout=max(1.0, deadline - time.monotonic()))[0])
        except subprocess.TimeoutExpired:
            for other in workers:
                other.kill()
            tails = [other.communicate()[0][-3000:] for other in workers]
            pytest.fail(f"the workers took over {WORKERS_TIMEOUT_S} s:\n" + "\n----\n".join(tails))
    for w, out in zip(workers, outputs, strict=True):
        assert w.returncode == 0, out[-4000:]
    study = optuna.load_study(study_name=study_name, storage=URL)
    trials = study.get_trials()
    numbers = [t.number for t in trials]
    assert len(numbers) == len(set(numbers))
    done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    digests = [t.user_attrs["config_digest"] for t in done]
    assert len(digests) == len(set(digests))  # the same configuration was never measured twice
    assert sum(t.user_attrs.get("role") == "baseline" for t in done) == 1
    counted = [t for t in trials if t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)]
    assert 4 <= len(counted) <= 5  # each worker stops at 4; one may have been mid-trial when the other got there
    assert len({t.user_attrs["worker"] for t in counted}) == 2  # both workers took trials
    finals = ResultsDB(URL).finalists(study=study_name)  # none when no candidate was faster in search
    for round_ in {f["round"] for f in finals}:  # each round of confirmation ran on one worker only
        assert len({f["verdict"]["worker"] for f in finals if f["round"] == round_}) == 1, finals
