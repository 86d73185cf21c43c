#!/usr/bin/env bash
# GPU machine, real model (../shared/device/real-model builds /tmp/real-model/exl3-4.0): a study of the
# real Qwen2.5-Coder-0.5B-Instruct, gated on fidelity (the GPU machine has no verifiers: --suite none), in
# one or more device calls. Each call stops the loop at STUDY_SECONDS (as a kill would) and copies
# results.db to $OUT; the next call on the warm machine resumes it from /tmp/real-study.
#   source .device-kit/setup.sh && bash .ci/gpu/real-study.sh [more autoresearch flags]
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
state=/tmp/real-study; mkdir -p "$state"
if [ ! -f "$state/results.db" ] && [ -f .gpu-state/real-study/results.db ]; then cp .gpu-state/real-study/results.db "$state/"; fi
timeout "${STUDY_SECONDS:-540}" python -m autoresearch --model /tmp/real-model/exl3-4.0 --suite none --vram 24GiB \
  --trials "${TRIALS:-12}" --finalists 2 --finalist-launches 2 --bench-max-repeats 5 --grace 20 \
  --enqueue draft_mode=ngram --enqueue max_chunk_size=8192 --enqueue draft_mode=ngram,max_chunk_size=8192 \
  --enqueue cache_kind=quant,cache_k_bits=8,cache_v_bits=8 \
  --storage "sqlite:///$state/results.db" --results-md "$out/RESULTS.md" --workdir /tmp/real-runs "$@" \
  >>"$out/study.log" 2>&1
echo "exit $?"
python -c "import sqlite3, sys; sqlite3.connect(sys.argv[1]).backup(sqlite3.connect(sys.argv[2]))" \
  "$state/results.db" "$out/results.db"
grep -E "Trial [0-9]+ (finished|failed)|champion|Error|error:" "$out/study.log" | tail -30
