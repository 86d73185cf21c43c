"""Claims across hosts: a holder beats a heartbeat while it works; one that falls silent past the grace
period is taken over by any worker, a finished claim never is, and a holder that lost its claim knows.

Runs on SQLite, and on PostgreSQL where AUTORESEARCH_TEST_POSTGRES_URL names a server (CI starts one).
Real time, short periods: the heartbeat is a thread, and its timing is what is under test.
"""

from __future__ import annotations

import os
import threading
import time
import uuid

import pytest
import sqlalchemy as sa

from autoresearch.ground.db import ResultsDB

PG_URL = os.environ.get("AUTORESEARCH_TEST_POSTGRES_URL")
CLAIM = {"what": "confirm finalists", "key": "after 8 finished trials"}


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'results.db'}"
    if not PG_URL:
        pytest.skip("AUTORESEARCH_TEST_POSTGRES_URL is not set")
    return PG_URL


@pytest.fixture
def study():
    return f"claims-{uuid.uuid4().hex[:8]}"  # PostgreSQL is shared between tests: a study of our own


def test_a_silent_holder_on_another_host_is_taken_over_after_the_grace_period(url, study):
    silent, survivor = ResultsDB(url), ResultsDB(url)
    assert silent.claim(study=study, worker="host-a:11", **CLAIM) is None  # then killed: no heartbeat follows
    assert survivor.claim(study=study, worker="host-b:22", grace_s=0.6, **CLAIM) == "host-a:11", \
        "inside the grace period the holder keeps its claim"
    time.sleep(0.8)
    assert survivor.claim(study=study, worker="host-b:22", grace_s=0.6, **CLAIM) is None
    assert [r["worker"] for r in survivor.claim_rows(study=study)] == ["host-b:22"]
    # without a grace period nobody can tell a silent holder on another host from a slow one
    assert ResultsDB(url).claim(study=study, worker="host-c:33", **CLAIM) == "host-b:22"


def test_a_beating_holder_keeps_its_claim_and_finishing_it_keeps_it_for_good(url, study):
    holder, other = ResultsDB(url), ResultsDB(url)
    assert holder.claim(study=study, worker="host-a:11", **CLAIM) is None
    # beats every 0.1 s against a grace period of 1.5 s: a loaded 2-core CI machine stalled the beating thread
    # past a 0.5 s grace once (the holder is not what this test is about: its claim kept while it beats is)
    with holder.holding(study=study, worker="host-a:11", interval_s=0.1, **CLAIM) as lost:
        for _ in range(5):  # 2 s, well past the grace period, beating all along
            time.sleep(0.4)
            assert other.claim(study=study, worker="host-b:22", grace_s=1.5, **CLAIM) == "host-a:11"
        assert not lost.is_set()
    [row] = holder.claim_rows(study=study)
    assert row["finished_at"] is not None and row["heartbeat_at"] >= row["created_at"]
    time.sleep(1.8)  # silent since it finished: still done, never taken over
    assert other.claim(study=study, worker="host-b:22", grace_s=1.5, **CLAIM) == "host-a:11"


def test_a_holder_that_fails_releases_its_claim_at_once(url, study):
    holder, other = ResultsDB(url), ResultsDB(url)
    assert holder.claim(study=study, worker="host-a:11", **CLAIM) is None
    with pytest.raises(RuntimeError, match="launch failed"):
        with holder.holding(study=study, worker="host-a:11", interval_s=5, **CLAIM):
            raise RuntimeError("launch failed")
    assert holder.claim_rows(study=study) == []
    assert other.claim(study=study, worker="host-b:22", **CLAIM) is None


def test_a_stalled_holder_learns_that_its_claim_was_taken_over(url, study):
    """Beats every 0.4 s against a grace period of 0.2 s: silent long enough for another worker to take
    the claim, and the next beat finds the row no longer its own."""
    stalled, other = ResultsDB(url), ResultsDB(url)
    assert stalled.claim(study=study, worker="host-a:11", **CLAIM) is None
    with stalled.holding(study=study, worker="host-a:11", interval_s=0.4, **CLAIM) as lost:
        time.sleep(0.3)
        assert other.claim(study=study, worker="host-b:22", grace_s=0.2, **CLAIM) is None
        assert lost.wait(timeout=2.0)
    [row] = other.claim_rows(study=study)
    assert row["worker"] == "host-b:22" and row["finished_at"] is None, "the stalled holder finished nothing"


def test_two_survivors_take_a_silent_claim_once(url, study):
    ResultsDB(url).claim(study=study, worker="host-a:11", **CLAIM)
    time.sleep(0.4)
    got: dict[str, str | None] = {}

    def take(worker: str) -> None:
        got[worker] = ResultsDB(url).claim(study=study, worker=worker, grace_s=0.3, **CLAIM)

    threads = [threading.Thread(target=take, args=(w,)) for w in ("host-b:22", "host-c:33")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [w for w, holder in got.items() if holder is None]
    assert len(winners) == 1, got
    [loser] = set(got) - set(winners)
    assert got[loser] == winners[0]


def test_a_claim_written_before_the_heartbeat_column_counts_from_its_creation(tmp_path):
    """Revision 0002's rows of old: NULL heartbeat, so created_at is the holder's last sign of life."""
    url = f"sqlite:///{tmp_path / 'results.db'}"
    db = ResultsDB(url)
    assert db.claim(study="s", worker="host-a:11", **CLAIM) is None
    with db.engine.begin() as conn:
        conn.execute(sa.text("UPDATE ar_claims SET heartbeat_at = NULL"))
    assert db.claim(study="s", worker="host-b:22", grace_s=3600, **CLAIM) == "host-a:11"
    time.sleep(0.3)
    assert db.claim(study="s", worker="host-b:22", grace_s=0.2, **CLAIM) is None


def test_a_holder_that_cannot_reach_the_database_past_the_grace_period_treats_its_claim_as_lost(url, study,
                                                                                                 monkeypatch):
    """A database outage: every beat fails. Past the grace period another worker may have taken the claim
    without this one seeing it, so the holder must stop counting it as its own."""
    holder = ResultsDB(url)
    assert holder.claim(study=study, worker="host-a:11", **CLAIM) is None
    engine = holder.engine

    class Outage:
        def begin(self):
            raise sa.exc.OperationalError("UPDATE ar_claims", {}, Exception("server closed the connection"))

    with holder.holding(study=study, worker="host-a:11", interval_s=0.05, grace_s=0.3, **CLAIM) as lost:
        monkeypatch.setattr(holder, "engine", Outage())
        assert not lost.wait(timeout=0.15), "a missed beat or two is within the grace period"
        assert lost.wait(timeout=2.0)
        monkeypatch.setattr(holder, "engine", engine)  # back, for the claim's release below


def test_a_holder_checks_the_claim_is_its_own_in_the_transaction_that_writes_its_decision(url, study):
    holder, other = ResultsDB(url), ResultsDB(url)
    assert holder.claim(study=study, worker="host-a:11", **CLAIM) is None
    row = {"round_": 1, "trial": 3, "config_digest": "d" * 64, "decode": 1.0, "prefill": 2.0, "verdict": {}}
    with other.engine.begin() as conn:  # taken over while the holder was not looking
        conn.execute(sa.text("UPDATE ar_claims SET worker = 'host-b:22' WHERE study = :s"), {"s": study})
    assert not holder.finish(study=study, worker="host-a:11", finalist_rows=[row], **CLAIM)
    assert holder.finalists(study=study) == []
    assert other.finish(study=study, worker="host-b:22", finalist_rows=[row], **CLAIM)
    assert [r["trial"] for r in other.finalists(study=study)] == [3]
    # finished: never taken over, however long its holder is silent
    time.sleep(0.3)
    assert holder.claim(study=study, worker="host-a:11", grace_s=0.1, **CLAIM) == "host-b:22"
