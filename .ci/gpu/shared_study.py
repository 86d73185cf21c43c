"""Helpers of .ci/gpu/shared_study.sh (two autoresearch workers sharing one study on PostgreSQL).

    python .ci/gpu/shared_study.py nvml CSV                      # NVML per GPU every second until SIGTERM
    python .ci/gpu/shared_study.py createdb URL                  # CREATE DATABASE (URL names it) if missing
    python .ci/gpu/shared_study.py worker [--pid-release] -- ARGS  # python -m autoresearch ARGS, SIGTERM = Ctrl-C
    python .ci/gpu/shared_study.py running URL STUDY WORKER SECONDS # exit 0 once WORKER (host:pid) is mid-trial
    python .ci/gpu/shared_study.py export URL STUDY SQLITE_PATH  # the study and the results tables into SQLite
    python .ci/gpu/shared_study.py summary URL STUDY PHASES_JSON OUT_JSON

`worker --pid-release` (RELEASE=pid in shared_study.sh) was for workers sharing ONE GPU before
serving/gpu_memory.wait_released told another worker's server apart (it waited for the GPU's whole
usage to come back, which another server on the GPU prevents): the wait is then only for the stopped
server's process to leave the GPU. Kept as a fallback; serving's own wait is the default.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import socket
import sys
import time
import warnings
from collections import Counter
from pathlib import Path


def nvml(path: str) -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:  # no NVML here (the CPU rehearsal): nothing to sample
        print(f"nvml: not sampling ({type(exc).__name__}: {exc})", file=sys.stderr)
        return 0
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    reads = (lambda h: pynvml.nvmlDeviceGetUtilizationRates(h).gpu,
             lambda h: pynvml.nvmlDeviceGetUtilizationRates(h).memory,
             lambda h: pynvml.nvmlDeviceGetMemoryInfo(h).used // 2**20,
             lambda h: len(pynvml.nvmlDeviceGetComputeRunningProcesses(h)),
             lambda h: round(pynvml.nvmlDeviceGetPowerUsage(h) / 1000, 1),
             lambda h: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM))
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["time", "gpu", "util_pct", "mem_util_pct", "mem_used_mib", "compute_procs", "power_w", "sm_mhz"])
        while not stop:
            now = round(time.time(), 2)
            for i, h in enumerate(handles):
                row = [now, i]
                for read in reads:
                    try:
                        row.append(read(h))
                    except Exception:
                        row.append("")
                out.writerow(row)
            f.flush()
            time.sleep(max(0.0, 1.0 - (time.time() - now)))
    pynvml.nvmlShutdown()
    return 0


def createdb(url: str) -> int:
    import sqlalchemy as sa

    target = sa.make_url(url)
    admin = sa.create_engine(target.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        if not conn.execute(sa.text("SELECT 1 FROM pg_database WHERE datname = :d"), {"d": target.database}).first():
            conn.execute(sa.text(f'CREATE DATABASE "{target.database}"'))
    admin.dispose()
    return 0


def worker(argv: list[str]) -> int:
    import runpy

    if argv and argv[0] == "--pid-release":
        argv = argv[1:]
        _release_by_pid()
    if argv and argv[0] == "--":
        argv = argv[1:]

    def interrupt(*_):  # a clean stop: Optuna fails the trial in flight, the server is stopped
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, interrupt)  # a background job of a script starts with SIGINT ignored
    sys.argv = ["autoresearch", *argv]
    print(f"worker {socket.gethostname()}:{os.getpid()} CUDA_VISIBLE_DEVICES="
          f"{os.environ.get('CUDA_VISIBLE_DEVICES')!r}: python -m autoresearch {' '.join(argv)}", flush=True)
    try:
        runpy.run_module("autoresearch", run_name="__main__", alter_sys=True)
    except KeyboardInterrupt:
        print("worker: stopped (SIGTERM/SIGINT)", flush=True)
        return 130
    return 0


def _release_by_pid() -> None:
    """serving's wait for a stopped server's GPU memory, by process only (see the module docstring)."""
    from gpu import visible_gpu
    from serving import gpu_memory, launcher

    if "wait_released" not in launcher.ServerProcess.stop.__code__.co_names:
        print("worker: serving.launcher no longer calls gpu_memory.wait_released; --pid-release does nothing",
              flush=True)

    def wait_released(baseline, *, pid: int, timeout_s: float = 60.0) -> None:
        with visible_gpu({"CUDA_VISIBLE_DEVICES": baseline.gpu_uuid}) as gpu:
            if gpu is None:
                return
            deadline = time.monotonic() + timeout_s
            while pid in gpu.compute_pids():
                if time.monotonic() > deadline:
                    raise gpu_memory.GpuMemoryNotReleased(f"server pid {pid} still on {baseline.gpu_uuid} "
                                                          f"{timeout_s:.0f} s after it stopped")
                time.sleep(0.5)

    gpu_memory.wait_released = wait_released
    print("worker: --pid-release: after a server stops, wait only for its process to leave the GPU "
          "(the GPU is shared with another worker)", flush=True)


def _study(url: str, name: str):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.load_study(study_name=name, storage=url)


def running(url: str, study_name: str, who: str, seconds: str) -> int:
    """Exit 0 as soon as `who` holds a RUNNING trial (printing it), 1 after `seconds`."""
    import optuna

    deadline = time.monotonic() + float(seconds)
    while True:
        try:
            trials = _study(url, study_name).get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
        except Exception as exc:  # the study may not exist yet
            trials, _ = [], exc
        mine = [t for t in trials if t.user_attrs.get("worker") == who]
        if mine:
            t = mine[0]
            print(f"trial {t.number} is running on {who} (stage {t.user_attrs.get('stage')}, "
                  f"digest {str(t.user_attrs.get('config_digest'))[:12]})")
            return 0
        if time.monotonic() > deadline:
            print(f"{who} holds no running trial after {seconds} s")
            return 1
        time.sleep(0.5)


def export(url: str, study_name: str, path: str) -> int:
    """Optuna's study (optuna.copy_study) and every results table (results.schema) into a SQLite file."""
    import optuna
    import sqlalchemy as sa

    target = Path(path)
    target.unlink(missing_ok=True)
    sqlite_url = f"sqlite:///{target}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        optuna.copy_study(from_study_name=study_name, from_storage=url, to_storage=sqlite_url)
    import results
    from results.schema import metadata

    source, dest = results.make_engine(url), results.connect(sqlite_url)
    counts = {}
    with source.connect() as src, dest.begin() as dst:
        for table in metadata.sorted_tables:
            rows = [dict(r) for r in src.execute(sa.select(table)).mappings()]
            if rows:
                dst.execute(sa.insert(table), rows)
            counts[table.name] = len(rows)
    source.dispose()
    dest.dispose()
    print(f"export: {target} ({target.stat().st_size} bytes): study {study_name}, rows {counts}")
    return 0


def summary(url: str, study_name: str, phases_path: str, out_path: str) -> int:
    """Trials per hour (one worker, two workers), duplicates, stale retries, who confirmed the finalists."""
    import optuna
    from optuna.storages import RetryFailedTrialCallback

    from autoresearch.ground.db import ResultsDB

    warnings.simplefilter("ignore")  # Optuna's ExperimentalWarning on retried_trial_number
    phases = json.loads(Path(phases_path).read_text())
    study = _study(url, study_name)
    trials = study.get_trials(deepcopy=False)
    finished = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)

    def ts(dt):
        return dt.timestamp() if dt is not None else None

    rows = []
    for t in trials:
        rows.append({"number": t.number, "state": t.state.name, "role": t.user_attrs.get("role"),
                     "worker": t.user_attrs.get("worker"), "outcome": t.user_attrs.get("outcome"),
                     "digest": t.user_attrs.get("config_digest"), "duplicate_of": t.user_attrs.get("duplicate_of"),
                     "retry_of": RetryFailedTrialCallback.retried_trial_number(t),
                     "start": ts(t.datetime_start), "end": ts(t.datetime_complete),
                     "seconds": round(ts(t.datetime_complete) - ts(t.datetime_start), 1)
                     if t.datetime_start and t.datetime_complete else None,
                     "values": t.values})
    baseline_end = min((r["end"] for r in rows if r["role"] == "baseline" and r["state"] == "COMPLETE" and r["end"]),
                       default=None)

    def window(name: str, start: float | None, end: float | None) -> dict:
        if start is None or end is None or end <= start:
            return {"window": name, "seconds": None}
        done = [r for r in rows if r["state"] in {s.name for s in finished} and r["end"] and start <= r["end"] <= end
                and r["role"] != "baseline" and r["duplicate_of"] is None]
        return {"window": name, "start": start, "end": end, "seconds": round(end - start, 1),
                "trials_finished": len(done), "trials_per_hour": round(3600 * len(done) / (end - start), 1),
                "mean_trial_s": round(sum(r["seconds"] for r in done) / len(done), 1) if done else None,
                "by_worker": dict(Counter(r["worker"] for r in done))}

    a0, a1 = phases.get("a_start"), phases.get("a_end")
    b0, kill, b1 = phases.get("b_start"), phases.get("kill"), phases.get("b_search_end")
    windows = [
        window("one worker (phase a, after the baseline)", max(a0, baseline_end) if a0 and baseline_end and
               baseline_end < (a1 or 0) else a0, a1),
        window("two workers (phase b, start to the kill)", b0, kill or b1),
        window("one worker (phase b, after the kill)", kill, b1),
    ]
    complete = [r for r in rows if r["state"] == "COMPLETE" and r["digest"]]
    dup = {d: [r["number"] for r in complete if r["digest"] == d]
           for d, n in Counter(r["digest"] for r in complete).items() if n > 1}
    finals = ResultsDB(url).finalists(study=study_name)
    confirmers = sorted({(f["round"], (f.get("verdict") or {}).get("worker"),
                          ((f.get("verdict") or {}).get("gpu") or {}).get("uuid"))
                         for f in finals}, key=str)
    report = {
        "study": study_name, "phases": phases, "windows": windows,
        "trials": len(rows), "states": dict(Counter(r["state"] for r in rows)),
        "workers": dict(Counter(r["worker"] for r in rows)),
        "baselines_complete": sum(r["role"] == "baseline" and r["state"] == "COMPLETE" for r in rows),
        "duplicate_digests_among_complete": dup,
        "pruned_as_duplicate": [(r["number"], r["duplicate_of"]) for r in rows if r["duplicate_of"] is not None],
        "stale_retries": [(r["number"], r["retry_of"], r["worker"], r["state"]) for r in rows if r["retry_of"] is not None],
        "finalist_rounds": [{"round": r, "worker": w, "gpu": g} for r, w, g in confirmers],
        "champion": study.user_attrs.get("champion"),
        "trial_rows": rows,
    }
    Path(out_path).write_text(json.dumps(report, indent=1, default=str))
    print(f"study {study_name}: {len(rows)} trials {report['states']}; baselines complete: "
          f"{report['baselines_complete']}")
    for w in windows:
        if w.get("seconds"):
            print(f"  {w['window']}: {w['trials_finished']} trials in {w['seconds']:.0f} s = "
                  f"{w['trials_per_hour']:.0f} trials/hour (mean {w['mean_trial_s']} s/trial) {w['by_worker']}")
        else:
            print(f"  {w['window']}: no window")
    print(f"  duplicate config digests among COMPLETE trials: {dup or 'none'}; pruned as duplicates: "
          f"{report['pruned_as_duplicate'] or 'none'}")
    print(f"  stale trials retried (new, retry of, worker, state): {report['stale_retries'] or 'none'}")
    print(f"  finalists confirmed by (round, worker, gpu): {confirmers or 'no confirmation recorded'}")
    champ = report["champion"] or {}
    print(f"  champion: trial {champ.get('trial')} speed-up {champ.get('speedup')} confirmed_by "
          f"{champ.get('confirmed_by')}")
    print("  trials: " + "; ".join(f"{r['number']} {r['state']} {r['role']} {r['outcome']} {r['worker']} "
                                   f"{r['seconds']}s" for r in rows))
    return 0


def main(argv: list[str]) -> int:
    command, args = argv[0], argv[1:]
    if command == "worker":
        return worker(args)
    return {"nvml": nvml, "createdb": createdb, "running": running, "export": export,
            "summary": summary}[command](*args)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
