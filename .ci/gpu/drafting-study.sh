#!/usr/bin/env bash
# GPU machine, real model (issue #13): a study that explores drafting unattended, decode measured on the
# offline suite's workload (its tasks by kind, weighted as the suite weights them; the file is made here by
# `python -m autoresearch workload --suite offline`, since the GPU machine has no reasoning-gym). Nothing is enqueued
# but the baseline; the KV cache is pinned to fp16 (quantized caches fail the gate on this model, measured).
# The GPU machine has no verifiers: the gate is the fidelity tier (--suite none). One or more device calls:
# each stops the loop at STUDY_SECONDS (as a kill would) and copies results.db to $OUT; the next call on the
# warm machine resumes it from /tmp/drafting-study.
#   source .device-kit/setup.sh && bash .ci/gpu/drafting-study.sh [more autoresearch flags]
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
state=/tmp/drafting-study; mkdir -p "$state"
timeout "${STUDY_SECONDS:-540}" python -m autoresearch --model /tmp/real-model/exl3-4.0 --suite none --vram 24GiB \
  --bench-workload "${WORKLOAD:-examples/real-0.5b-workload/workload-offline.json}" \
  --trials "${TRIALS:-16}" --finalists 2 --finalist-launches 2 --bench-max-repeats 5 --grace 20 \
  --pin cache_kind=fp16 --study drafting-workload \
  --storage "sqlite:///$state/results.db" --results-md "$out/RESULTS.md" --workdir /tmp/drafting-runs "$@" \
  >>"$state/study.log" 2>&1
echo "exit $?"
cp "$state/study.log" "$out/study.log"
python -c "import sqlite3, sys; sqlite3.connect(sys.argv[1]).backup(sqlite3.connect(sys.argv[2]))" \
  "$state/results.db" "$out/results.db"
grep -E "Trial [0-9]+ (finished|failed)|champion|Error|error:" "$state/study.log" | tail -30
