#!/usr/bin/env bash
# GPU machine: a short study on the shape-true 27B under a 24 GiB cap, in one or more device calls.
#   source .device-kit/setup.sh && bash .ci/gpu/study.sh [more autoresearch flags]
# The reference is exllamav3's defaults with exact GEMV (EXL3_INT8_GEMV=0), so the gate decides
# whether the int8 GEMV (exllamav3's default, 2) keeps fidelity. The device README table's rows are
# enqueued first, so the same run reproduces that table. A device call lasts at most 10 minutes: the
# loop is stopped at STUDY_SECONDS (like a kill -9), its results.db comes back in $OUT, and the next
# call resumes it from .gpu-state/results.db (carry it). The task tier cannot run there (no verifiers
# on that machine), so the gate is fidelity alone and RESULTS.md says so.
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
state=/tmp/study-state; mkdir -p "$state"
if [ ! -f "$state/results.db" ] && [ -f .gpu-state/results.db ]; then cp .gpu-state/results.db "$state/"; fi
bash .ci/gpu/models.sh q27 || exit 1
gemv2="EXL3_INT8_GEMV=2" q8="cache_kind=quant,cache_k_bits=8,cache_v_bits=8,EXL3_QC_STAGING=1"
q4="cache_kind=quant,cache_k_bits=4,cache_v_bits=4,EXL3_QC_STAGING=1"
timeout "${STUDY_SECONDS:-560}" python -m autoresearch --model /tmp/q27 --suite none --vram 24GiB --emulate-vram \
  --baseline EXL3_INT8_GEMV=0 --trials 8 --finalists 2 --finalist-launches 1 --bench-max-repeats 4 \
  --pin cache_tokens=32768 --pin cache_slots=1 \
  --enqueue $gemv2 --enqueue max_chunk_size=4096,$gemv2 --enqueue max_chunk_size=8192,$gemv2 \
  --enqueue max_chunk_size=4096,$gemv2,$q8 --enqueue max_chunk_size=4096,$gemv2,$q4 --enqueue max_chunk_size=4096 \
  --storage "sqlite:///$state/results.db" --results-md "$out/RESULTS.md" --workdir /tmp/study "$@" \
  >>"$out/study.log" 2>&1
echo "exit $?"
python -c "import sqlite3, sys; sqlite3.connect(sys.argv[1]).backup(sqlite3.connect(sys.argv[2]))" \
  "$state/results.db" "$out/results.db"
tail -4 "$out/study.log"
