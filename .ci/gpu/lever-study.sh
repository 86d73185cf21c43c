#!/usr/bin/env bash
# GPU machine, real model (issue #27): a study ranked by request time that starts from the catalog's levers
# (the baseline, then each drafting mode the checkpoint allows and each prefill chunk size, one change each,
# then TPE), on bench's corpus with decode timed on the model's own answers. Nothing is enqueued by hand.
# The GPU machine has no verifiers: the gate is the fidelity tier (--suite none). One or more device calls:
# each stops the loop at STUDY_SECONDS (as a kill would) and copies results.db, RESULTS.md and the log to
# $OUT; the next call on the warm machine resumes it from /tmp/lever-study (or from .gpu-state/lever-study/
# results.db, carried, on a fresh machine). Then `python .ci/gpu/lever_table.py` measures each lever alone.
#   source .device-kit/setup.sh && bash .ci/gpu/lever-study.sh [more autoresearch flags]
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
state=/tmp/lever-study; mkdir -p "$state"
if [ ! -f "$state/results.db" ] && [ -f .gpu-state/lever-study/results.db ]; then cp .gpu-state/lever-study/results.db "$state/"; fi
timeout "${STUDY_SECONDS:-540}" python -m autoresearch --model "${MODEL:-/tmp/real-model/exl3-4.0}" --suite none \
  --vram 24GiB --bench-workload corpus --bench-decode-until eos \
  --bench-decode 1024 --bench-decode-tokens 256 --trials "${TRIALS:-16}" --finalists 2 --finalist-launches 2 --bench-max-repeats 5 --grace 20 \
  --pin cache_kind=fp16 --study lever-study \
  --storage "sqlite:///$state/results.db" --results-md "$out/RESULTS.md" --workdir /tmp/lever-runs "$@" \
  >>"$state/study.log" 2>&1
echo "exit $?"
cp "$state/study.log" "$out/study.log"
python -c "import sqlite3, sys; sqlite3.connect(sys.argv[1]).backup(sqlite3.connect(sys.argv[2]))" \
  "$state/results.db" "$out/results.db"
grep -E "Trial [0-9]+ (finished|failed)|champion|Error|error:" "$state/study.log" | tail -30
