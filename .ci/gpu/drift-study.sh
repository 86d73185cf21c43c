#!/usr/bin/env bash
# GPU machine, real model (../shared/device/real-model builds /tmp/real-model/exl3-4.0): a 10-trial study
# of the real Qwen2.5-Coder-0.5B-Instruct with the drift check on, re-measuring the baseline every
# DRIFT_K trials (default 3), gated on fidelity (no verifiers there: --suite none). In one or more
# device calls: each stops the loop at STUDY_SECONDS (as a kill would) and the next, on the warm
# machine, resumes it from /tmp/drift-study. After every call $OUT holds study.log, RESULTS.md (its
# "Baseline drift" section: each reading's time, decode, prefill, ratio to the first, host and GPU),
# results.db and drift-cost.json (drift checks, their seconds and their share of the search's time,
# launches added per trial launch; .ci/gpu/drift_cost.py).
# COMPETE=1 also runs a bounded competing GPU load (matmuls, COMPETE_S seconds from COMPETE_AFTER_S
# seconds into the call), so the baseline drifts mid-study and the check has something to find.
#   source .device-kit/setup.sh && bash .ci/gpu/drift-study.sh [more autoresearch flags]
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
state=/tmp/drift-study; mkdir -p "$state"
competitor=
if [ "${COMPETE:-0}" = 1 ]; then
  python - "${COMPETE_AFTER_S:-120}" "${COMPETE_S:-150}" >>"$out/compete.log" 2>&1 <<'PY' &
import sys, time, torch
after, length = float(sys.argv[1]), float(sys.argv[2])
time.sleep(after)
a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
end, n = time.monotonic() + length, 0
print(f"competing load from {time.strftime('%H:%M:%S')} for {length:.0f} s", flush=True)
while time.monotonic() < end:
    (a @ a).sum().item(); n += 1
print(f"competing load ended at {time.strftime('%H:%M:%S')} after {n} matmuls", flush=True)
PY
  competitor=$!
fi
start=$(date +%s)
timeout "${STUDY_SECONDS:-540}" python -m autoresearch --model /tmp/real-model/exl3-4.0 --suite none --vram 24GiB \
  --trials "${TRIALS:-10}" --finalists 2 --finalist-launches 2 --bench-max-repeats 5 --port 0 \
  --drift-every-trials "${DRIFT_K:-3}" --drift-every-minutes "${DRIFT_T:-30}" \
  --enqueue draft_mode=ngram --enqueue max_chunk_size=8192 \
  --storage "sqlite:///$state/results.db" --results-md "$out/RESULTS.md" --workdir /tmp/drift-runs "$@" \
  >>"$out/study.log" 2>&1
echo "exit $? after $(( $(date +%s) - start )) s"
[ -n "$competitor" ] && kill "$competitor" 2>/dev/null
python -c "import sqlite3, sys; sqlite3.connect(sys.argv[1]).backup(sqlite3.connect(sys.argv[2]))" \
  "$state/results.db" "$out/results.db"
python .ci/gpu/drift_cost.py "sqlite:///$state/results.db" >"$out/drift-cost.json"
python - "$out/drift-cost.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print({k: d[k] for k in ("trials", "search_seconds", "drift_checks", "drift_check_seconds",
                         "drift_share_of_search_time", "trial_launches", "drift_launches_per_trial_launch")})
for r in d["readings"]:
    print(r["source"], r["at"][11:19], r["decode"], r["prefill"], r["decode_vs_first"], r["prefill_vs_first"])
print("held:", [(h["trial"], h["warning"]) for h in d["held_trials"]])
PY
grep -E "Trial [0-9]+ (finished|failed|pruned)|baseline drift|champion|Error|error:" "$out/study.log" | tail -30
