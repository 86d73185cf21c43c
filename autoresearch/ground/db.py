"""The loop's rows in results.db: measurements, provenance, finalists, claims (tables in results.schema).

Rows are append-only: a killed loop loses at most the row it was writing. Opening migrates the
database's results tables (results.connect).

Usage:
    db = ResultsDB("sqlite:///results.db")
    db.add_measurement(study="s", trial=3, kind="bench", config_digest=d, payload=result.to_dict())
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

import results
from results.schema import claims, finalists, measurements, now, provenance

__all__ = ["ResultsDB"]

log = logging.getLogger(__name__)


def _rows(conn, query) -> list[dict[str, Any]]:
    return [dict(row._mapping) for row in conn.execute(query)]


class ResultsDB:
    def __init__(self, url: str):
        self.url = url
        self.engine = results.connect(url)

    def add_measurement(self, *, study: str, trial: int | None, kind: str, config_digest: str,
                        payload: dict[str, Any], launch: int = 0) -> int:
        with self.engine.begin() as conn:
            result = conn.execute(insert(measurements).values(
                study=study, trial=trial, kind=kind, config_digest=config_digest, launch=launch, payload=payload))
            return result.inserted_primary_key[0]

    def measurements(self, *, study: str, kind: str | None = None, trial: int | None = None,
                     config_digest: str | None = None) -> list[dict[str, Any]]:
        query = select(measurements).where(measurements.c.study == study)
        if kind is not None:
            query = query.where(measurements.c.kind == kind)
        if trial is not None:
            query = query.where(measurements.c.trial == trial)
        if config_digest is not None:
            query = query.where(measurements.c.config_digest == config_digest)
        with self.engine.connect() as conn:
            return _rows(conn, query.order_by(measurements.c.id))

    def add_provenance(self, *, study: str, trial: int | None, config_digest: str, model_manifest_hash: str,
                       engine: str, details: dict[str, Any]) -> None:
        gpu = details.get("gpu") or {}
        server = details.get("server_info") or {}
        with self.engine.begin() as conn:
            conn.execute(insert(provenance).values(
                study=study, trial=trial, config_digest=config_digest, model_manifest_hash=model_manifest_hash,
                engine=engine, engine_version=server.get("engine_version"), torch_version=server.get("torch_version"),
                gpu_name=gpu.get("name"), gpu_driver=gpu.get("driver"), details=details))

    def provenance(self, *, study: str) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            return _rows(conn, select(provenance).where(provenance.c.study == study).order_by(provenance.c.id))

    def add_finalist(self, *, study: str, round_: int, trial: int, config_digest: str, decode: float | None,
                     prefill: float | None, verdict: dict[str, Any]) -> None:
        with self.engine.begin() as conn:
            conn.execute(insert(finalists).values(
                study=study, round=round_, trial=trial, config_digest=config_digest, decode_tok_per_s=decode,
                prefill_tok_per_s=prefill, verdict=verdict))

    def finalists(self, *, study: str) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            return _rows(conn, select(finalists).where(finalists.c.study == study).order_by(finalists.c.id))

    def claim(self, *, study: str, what: str, key: str, worker: str, grace_s: float | None = None,
              holder_gone: Callable[[str], bool] = lambda _: False) -> str | None:
        """Take a piece of work once across every worker of a study: None when this worker got it, else
        the worker that holds it (the database's unique constraint decides, on SQLite and PostgreSQL).

        An unfinished claim whose holder is gone is taken over: its row is deleted and the claim tried
        once more, so two survivors still get it once. Gone is `holder_gone(holder)` (a process of this
        host that has left), or, given `grace_s`, no heartbeat (`holding`) for longer than that, which
        any worker on any host can see. Hosts' clocks are taken to agree to well within `grace_s`."""
        where = (claims.c.study == study) & (claims.c.what == what) & (claims.c.key == key)
        holder = "another worker"
        for _ in range(2):
            try:
                with self.engine.begin() as conn:
                    conn.execute(insert(claims).values(study=study, what=what, key=key, worker=worker,
                                                       heartbeat_at=now()))
                return None
            except IntegrityError:
                with self.engine.connect() as conn:
                    row = conn.execute(select(claims).where(where)).first()
                if row is None:  # released between our insert and our look: try again
                    continue
                holder = row.worker
                gone = row.finished_at is None and holder_gone(holder)
                if row.finished_at is not None or not (gone or _silent(row, grace_s)):
                    return holder
                log.warning("taking over the claim to %s (%s) from %s: %s", what, key, holder,
                            "its process has left" if gone else f"no heartbeat for over {grace_s} s")
                # that row as we saw it only: a survivor may have replaced it (ids recur), and a holder that
                # beat or finished since keeps it (then our insert fails again and names it)
                with self.engine.begin() as conn:
                    conn.execute(delete(claims).where(
                        (claims.c.id == row.id) & (claims.c.worker == holder) & claims.c.finished_at.is_(None)
                        & _same_heartbeat(row.heartbeat_at)))
        return holder

    @contextlib.contextmanager
    def holding(self, *, study: str, what: str, key: str, worker: str, interval_s: float,
                grace_s: float | None = None) -> Iterator[threading.Event]:
        """While the work of a claim this worker got runs: beat its heartbeat every `interval_s` from a
        daemon thread; on a clean exit mark it finished, on an exception release it for another worker.

        Yields an Event that is set once the claim may no longer be this worker's: another worker took it
        over after our heartbeat stalled, or no beat got through for longer than `grace_s` (a database
        outage: another worker may have taken it meanwhile). Check it before the work's result is
        written, and write the result with `finish` (which checks ownership in the same transaction)."""
        where = _held(study=study, what=what, key=key, worker=worker)
        stop, lost = threading.Event(), threading.Event()

        def beat() -> None:
            last_beat = time.monotonic()
            while not stop.wait(interval_s):
                try:
                    with self.engine.begin() as conn:
                        if conn.execute(update(claims).where(where).values(heartbeat_at=now())).rowcount != 1:
                            lost.set()
                            return
                    last_beat = time.monotonic()
                except SQLAlchemyError as exc:  # a missed beat; the grace period covers a few, no more
                    silent_s = time.monotonic() - last_beat
                    log.warning("claim heartbeat failed (%.0f s without a beat): %s", silent_s, exc)
                    if grace_s is not None and silent_s > grace_s:
                        lost.set()
                        return

        thread = threading.Thread(target=beat, name="claim-heartbeat", daemon=True)
        thread.start()
        done = False
        try:
            yield lost
            done = True
        finally:
            stop.set()
            thread.join()
            with self.engine.begin() as conn:
                conn.execute(update(claims).where(where).values(finished_at=now(), heartbeat_at=now()) if done
                             else delete(claims).where(where))

    def finish(self, *, study: str, what: str, key: str, worker: str,
               finalist_rows: list[dict[str, Any]]) -> bool:
        """Write a claimed round's finalist rows and mark the claim finished, in one transaction that first
        checks the claim is still this worker's: False (nothing written) where it is not. A finished claim is
        never taken over, so no other worker can write a decision for it after this one."""
        with self.engine.begin() as conn:
            held = conn.execute(update(claims).where(_held(study=study, what=what, key=key, worker=worker))
                                .values(finished_at=now(), heartbeat_at=now())).rowcount == 1
            if held:
                for row in finalist_rows:
                    conn.execute(insert(finalists).values(study=study, round=row["round_"], trial=row["trial"],
                                                          config_digest=row["config_digest"],
                                                          decode_tok_per_s=row["decode"],
                                                          prefill_tok_per_s=row["prefill"], verdict=row["verdict"]))
            return held

    def claim_rows(self, *, study: str) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            return _rows(conn, select(claims).where(claims.c.study == study).order_by(claims.c.id))

    def close(self) -> None:
        self.engine.dispose()


def _held(*, study: str, what: str, key: str, worker: str):
    """The claim's row while it is `worker`'s and unfinished."""
    return ((claims.c.study == study) & (claims.c.what == what) & (claims.c.key == key)
            & (claims.c.worker == worker) & claims.c.finished_at.is_(None))


def _same_heartbeat(heartbeat_at):
    return claims.c.heartbeat_at.is_(None) if heartbeat_at is None else claims.c.heartbeat_at == heartbeat_at


def _silent(row, grace_s: float | None) -> bool:
    """No sign of life from the claim's holder for longer than grace_s (never, without a grace period)."""
    if grace_s is None:
        return False
    last = row.heartbeat_at or row.created_at
    return now() - last > dt.timedelta(seconds=grace_s)
