#!/usr/bin/env bash
# GPU machine (issue #15): two autoresearch workers share one study on a PostgreSQL server started
# here, on the real 0.5B (/tmp/real-model/exl3-4.0, built first by ../shared/device/real-model), gated
# on fidelity (--suite none). One device call, about 530 s:
#   (a) one worker alone for PHASE_A_S (120 s), then stopped (SIGTERM: its trial in flight fails);
#   (b) two workers on the same study for up to PHASE_B_S (350 s): each stops starting trials at
#       SEARCH_B_S (180 s), worker 1 is killed with kill -9 mid-trial at KILL_AT_S (90 s), worker 0
#       retries its stale trial (--heartbeat 5 --grace 20) and one worker confirms the finalists.
# Worker i gets CUDA_VISIBLE_DEVICES=i when nvidia-smi lists 2+ GPUs, else both share GPU 0: serving's
# wait for a stopped server's memory tells the other worker's server apart (serving/gpu_memory.py);
# RELEASE=pid swaps in shared_study.py's older process-only wait.
# NVML per GPU every second -> $OUT/nvml.csv. At the end: $OUT/study.sql (pg_dump), $OUT/results.db
# (SQLite copy: Optuna's study plus the results tables), $OUT/RESULTS.md, $OUT/summary.json, and
# $OUT/workers.log (every worker's log and PostgreSQL's); the summary is printed.
#
# Your machine, once: bash .ci/gpu/kit.sh && bash .ci/gpu/pg-kit.sh     (.device-kit/, .device-pg/)
# Device call (nvidia-h200; timeout_s 600), carry [".device-kit", ".device-pg"]:
#   source .device-kit/setup.sh && bash .ci/gpu/shared_study.sh
# (both: 62.4 MiB with the tree at 8.5 MiB, of the 64 MiB a call carries). Over 64 MiB? On a machine
# still warm from a call that sourced the kit, carry [".device-pg"] alone and run
# `bash .ci/gpu/shared_study.sh`: it then uses the kit already installed in /tmp/site.
#
# CPU rehearsal (the embedded tiny model on the transformers engine, short phases; PostgreSQL from
# .device-pg all the same; about 4.5 minutes on 2 cores):
#   PY=.venv/bin/python MODEL=embedded PHASE_A_S=90 PHASE_B_S=220 SEARCH_B_S=120 KILL_AT_S=50 \
#     OUT=/tmp/ss-out bash .ci/gpu/shared_study.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
root=$(pwd)
out=${OUT:-/tmp/out}; mkdir -p "$out"
t_start=$(date +%s)
MODEL=${MODEL:-/tmp/real-model/exl3-4.0}   # "embedded": the embedded default (tiny model, CPU engine)
PHASE_A_S=${PHASE_A_S:-120}; PHASE_B_S=${PHASE_B_S:-350}; SEARCH_B_S=${SEARCH_B_S:-180}; KILL_AT_S=${KILL_AT_S:-90}
DEADLINE_S=${DEADLINE_S:-570}               # everything, the dump and report included, ends before this
if [ "$MODEL" != embedded ] && [ ! -f "$MODEL/config.json" ]; then
  echo "no model at $MODEL: build it first (../shared/device/real-model), or set MODEL" >&2; exit 1
fi
state=/tmp/shared-study; rm -rf "$state"; mkdir -p "$state"
STUDY=${STUDY:-shared-$(date -u +%m%d%H%M)}
log() { echo "[$(( $(date +%s) - t_start ))s] $*"; }
elapsed() { echo $(( $(date +%s) - t_start )); }

# ---- the kit (exllamav3 and the rest) and the PostgreSQL client --------------------------------
ngpu=$( (nvidia-smi -L 2>/dev/null || true) | grep -c '^GPU ' )
if [ "$ngpu" -gt 0 ] && [ -z "${PYTHONPATH:-}" ]; then
  if [ -f .device-kit/setup.sh ]; then
    # shellcheck disable=SC1091
    source .device-kit/setup.sh || { echo "the kit did not install" >&2; exit 1; }
  elif [ -f /tmp/site/exllamav3_ext.so ]; then  # installed by an earlier call on this warm machine
    export PYTHONPATH="$root:/tmp/site" PYTHONUNBUFFERED=1 TORCH_EXTENSIONS_DIR=/tmp/torch_ext
  else
    echo "no .device-kit and no kit in /tmp/site: carry .device-kit" >&2; exit 1
  fi
fi
PY=${PY:-python3}
case $PY in */*) PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY") ;; esac  # the workers run elsewhere
case ":${PYTHONPATH:-}:" in *":$root:"*) ;; *) export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" ;; esac
export PYTHONUNBUFFERED=1
if ! "$PY" -c "import psycopg" 2>/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .device-pg/psycopg-*.whl .device-pg/psycopg_binary-*.whl || { echo "psycopg did not install" >&2; exit 1; }
  export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}/tmp/site"
  "$PY" -c "import psycopg; print('psycopg', psycopg.__version__, psycopg.pq.__impl__)" || exit 1
fi

# ---- PostgreSQL: a throwaway cluster in /tmp ----------------------------------------------------
pgroot=/tmp/shared-pg; rm -rf "$pgroot"; mkdir -p "$pgroot"
pgbin=$pgroot/pgserver/pginstall/bin
pguser=$(id -un)
if [ "$(id -u)" = 0 ]; then  # initdb and postgres refuse to run as root
  if id postgres >/dev/null 2>&1; then pguser=postgres
  elif id nobody >/dev/null 2>&1; then pguser=nobody
  else useradd -r -M -d /tmp pgrun && pguser=pgrun; fi
fi
as_pg() {
  if [ "$(id -u)" = 0 ]; then
    "$PY" -c 'import os, pwd, sys
u = pwd.getpwnam(sys.argv[1]); os.setgroups([]); os.setgid(u.pw_gid); os.setuid(u.pw_uid)
os.environ["HOME"] = "/tmp"; os.chdir("/tmp"); os.execv(sys.argv[2], sys.argv[2:])' "$pguser" "$@"
  else "$@"; fi
}
data=$pgroot/data; mkdir -p "$data"; chown "$pguser" "$data" 2>/dev/null || true
port=$("$PY" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
URL="postgresql+psycopg://postgres@127.0.0.1:$port/autoresearch"
pg_up() {
  "$PY" -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter='tar')" \
    "${PG_TARBALL:-.device-pg/pg.tar.xz}" "$pgroot" \
    || { echo "no PostgreSQL: bash .ci/gpu/pg-kit.sh here, and carry .device-pg" >&2; return 1; }
  as_pg "$pgbin/initdb" -D "$data" -A trust -U postgres -E UTF8 --locale=C >"$state/pg-initdb.log" 2>&1 \
    || { tail -20 "$state/pg-initdb.log"; echo "initdb failed" >&2; return 1; }
  as_pg "$pgbin/pg_ctl" -D "$data" -l "$data/server.log" -w -t 60 \
    -o "-p $port -k $data -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off" start \
    >"$state/pg-start.log" 2>&1 || { tail -20 "$state/pg-start.log" "$data/server.log"; echo "postgres did not start" >&2; return 1; }
  "$PY" .ci/gpu/shared_study.py createdb "$URL" || { tail -20 "$data/server.log"; return 1; }
}
storage=postgresql
if pg_up; then
  log "PostgreSQL $("$pgbin/postgres" --version | awk '{print $3}') on 127.0.0.1:$port as $pguser; study $STUDY; $ngpu GPU(s)"
elif [ "${PG_FALLBACK:-sqlite}" = sqlite ]; then  # the rest of the run still says something
  storage=sqlite; URL="sqlite:///$state/study.db"
  log "PostgreSQL FAILED (above); the workers share SQLite ($URL) instead; study $STUDY; $ngpu GPU(s)"
else
  exit 1
fi

# ---- NVML samples --------------------------------------------------------------------------------
"$PY" .ci/gpu/shared_study.py nvml "$out/nvml.csv" 2>>"$state/nvml.log" &
nvml_pid=$!

# ---- the workers ---------------------------------------------------------------------------------
common=(--study "$STUDY" --storage "$URL" --port 0 --heartbeat 5 --grace 20 --finalists 2
        --finalist-launches "${FINALIST_LAUNCHES:-1}")
if [ "$MODEL" = embedded ]; then
  read -r -a flags <<<"${STUDY_FLAGS:---suite none --pin threads=1}"
else
  read -r -a flags <<<"${STUDY_FLAGS:---suite none --vram 24GiB --bench-max-repeats 5 --enqueue draft_mode=ngram \
--enqueue max_chunk_size=8192 --enqueue draft_mode=ngram,max_chunk_size=8192}"
  flags=(--model "$MODEL" "${flags[@]}")
fi
release=()
if [ "$ngpu" = 1 ] && [ "${RELEASE:-stock}" = pid ]; then release=(--pid-release); fi
start_worker() {  # NAME GPU_INDEX HOURS: sets started (the pid)
  local name=$1 gpu=$2 hours=$3 dir=$state/$1
  mkdir -p "$dir"
  (  # from the project's root, as a user starts each worker (locks/ is read there)
    if [ "$ngpu" -gt 0 ]; then export CUDA_VISIBLE_DEVICES=$gpu; fi
    exec "$PY" "$root/.ci/gpu/shared_study.py" worker "${release[@]}" -- "${flags[@]}" "${common[@]}" \
      --hours "$hours" --workdir "$dir/runs" --results-md "$dir/RESULTS.md"
  ) >"$dir/worker.log" 2>&1 &
  started=$!
}
gpu_of() { if [ "$ngpu" -ge 2 ]; then echo "$1"; else echo 0; fi; }
alive() { kill -0 "$1" 2>/dev/null; }
stop_worker() {  # PID: SIGTERM (a clean stop), SIGKILL after 30 s; sets last_rc
  local pid=$1 i
  if alive "$pid"; then
    kill -TERM "$pid" 2>/dev/null
    for i in $(seq 60); do alive "$pid" || break; sleep 0.5; done
    alive "$pid" && kill -KILL "$pid" 2>/dev/null
  fi
  wait "$pid" 2>/dev/null; last_rc=$?
}
host=$("$PY" -c "import socket; print(socket.gethostname())")  # the workers' names are host:pid
hours() { "$PY" -c "print(round($1 / 3600, 6))"; }

# (a) one worker alone
a_start=$(date +%s)
start_worker phase-a "$(gpu_of 0)" 1; pa=$started
log "phase a: worker $pa alone for ${PHASE_A_S} s"
while alive "$pa" && [ $(( $(date +%s) - a_start )) -lt "$PHASE_A_S" ]; do sleep 1; done
a_end=$(date +%s)
stop_worker "$pa"
log "phase a: ended (exit status $last_rc)"

# (b) two workers on the same study
left=$(( DEADLINE_S - $(elapsed) - 60 ))  # a minute for the dump, the export and the report
[ "$PHASE_B_S" -gt "$left" ] && PHASE_B_S=$left
[ "$SEARCH_B_S" -gt $(( PHASE_B_S - 60 )) ] && SEARCH_B_S=$(( PHASE_B_S - 60 ))
b_start=$(date +%s)
start_worker w0 "$(gpu_of 0)" "$(hours "$SEARCH_B_S")"; p0=$started
start_worker w1 "$(gpu_of 1)" "$(hours "$SEARCH_B_S")"; p1=$started
log "phase b: workers $p0 (w0) and $p1 (w1) for up to ${PHASE_B_S} s, new trials until ${SEARCH_B_S} s"
while [ $(( $(date +%s) - b_start )) -lt "$KILL_AT_S" ] && alive "$p1"; do sleep 1; done
kill_at=""
if alive "$p1"; then
  # mid-trial: wait (up to 30 s) until w1 holds a RUNNING trial, then kill -9 it
  "$PY" .ci/gpu/shared_study.py running "$URL" "$STUDY" "$host:$p1" 30
  kill -KILL "$p1" 2>/dev/null; kill_at=$(date +%s)
  wait "$p1" 2>/dev/null; rc1=$?
  log "phase b: kill -9 worker $p1 (w1): exit status $rc1"
fi
while [ $(( $(date +%s) - b_start )) -lt "$PHASE_B_S" ] && { alive "$p0" || alive "$p1"; }; do sleep 1; done
b_end=$(date +%s)
for p in $p0 $p1; do alive "$p" && log "phase b: worker $p still running at ${PHASE_B_S} s: stopping it"; done
stop_worker "$p0"; rc0=$last_rc
if [ -z "$kill_at" ]; then stop_worker "$p1"; rc1=$last_rc; fi
log "phase b: ended (exit status w0 $rc0, w1 $rc1)"
# servers the killed worker left behind (each in its own process group; pid files under its workdir)
for f in $(find "$state" -path '*servers/*.pid' 2>/dev/null); do
  spid=$(cut -d' ' -f1 "$f")
  if kill -0 "$spid" 2>/dev/null; then log "stopping server $spid left by a killed worker"; kill -TERM -- "-$spid" 2>/dev/null; fi
done
sleep 2
kill -TERM "$nvml_pid" 2>/dev/null; wait "$nvml_pid" 2>/dev/null

# ---- results -------------------------------------------------------------------------------------
cat >"$state/phases.json" <<EOF
{"a_start": $a_start, "a_end": $a_end, "b_start": $b_start, "kill": ${kill_at:-null},
 "b_search_end": $(( b_start + SEARCH_B_S )), "b_end": $b_end, "gpus": $ngpu, "release": "${release[*]:-stock}",
 "model": "$MODEL", "study": "$STUDY", "storage": "$storage"}
EOF
if [ "$storage" = postgresql ]; then
  "$pgbin/pg_dump" -h 127.0.0.1 -p "$port" -U postgres --no-owner autoresearch >"$out/study.sql" 2>>"$state/pg-dump.log" \
    || log "pg_dump failed: $(tail -3 "$state/pg-dump.log")"
fi
timeout 60 "$PY" .ci/gpu/shared_study.py export "$URL" "$STUDY" "$out/results.db" 2>&1 | tail -3
report_flags=(--suite none); [ "$MODEL" = embedded ] || report_flags+=(--vram 24GiB)
timeout 90 "$PY" -m autoresearch report --study "$STUDY" --storage "$URL" --results-md "$out/RESULTS.md" \
  >"$state/report.log" 2>&1 || { log "report failed:"; tail -20 "$state/report.log"; }
{
  for w in phase-a w0 w1; do echo "===== worker $w ($state/$w/worker.log)"; cat "$state/$w/worker.log" 2>/dev/null; done
  echo "===== report"; cat "$state/report.log"
  echo "===== nvml sampler"; cat "$state/nvml.log" 2>/dev/null
  echo "===== PostgreSQL"; cat "$state/pg-initdb.log" "$data/server.log" 2>/dev/null | tail -200
} >"$out/workers.log"
echo "================ summary ================"
timeout 60 "$PY" .ci/gpu/shared_study.py summary "$URL" "$STUDY" "$state/phases.json" "$out/summary.json"
if [ -s "$out/nvml.csv" ]; then
  "$PY" - "$out/nvml.csv" "$b_start" "${kill_at:-$b_end}" <<'EOF'
import csv, sys
from collections import defaultdict
rows, b0, b1 = list(csv.DictReader(open(sys.argv[1]))), float(sys.argv[2]), float(sys.argv[3])
for label, keep in (("whole run", lambda t: True), ("two workers (phase b to the kill)", lambda t: b0 <= t <= b1)):
    per = defaultdict(list)
    for r in rows:
        if keep(float(r["time"])) and r["util_pct"] != "":
            per[r["gpu"]].append((int(r["util_pct"]), int(r["mem_used_mib"] or 0), int(r["compute_procs"] or 0)))
    for gpu, s in sorted(per.items()):
        busy = sum(u > 0 for u, _, _ in s) / len(s)
        print(f"  NVML gpu {gpu}, {label}: {len(s)} samples, util mean {sum(u for u, _, _ in s) / len(s):.0f}%, "
              f"busy (util>0) {100 * busy:.0f}% of samples, memory max {max(m for _, m, _ in s)} MiB, "
              f"processes max {max(p for _, _, p in s)}")
EOF
fi
for w in phase-a w0 w1; do echo "----- $w log tail"; tail -n 8 "$state/$w/worker.log" 2>/dev/null; done
[ "$storage" = postgresql ] && as_pg "$pgbin/pg_ctl" -D "$data" -m fast stop >/dev/null 2>&1
log "done; files in $out: $(ls "$out" | tr '\n' ' ')"
