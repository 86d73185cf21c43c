#!/usr/bin/env bash
# GPU machine, one device call: a short study on the shape-true 27B under a 24 GiB cap. The README
# table's rows are enqueued first; the task tier cannot run there (no verifiers on that machine), so
# the gate is fidelity alone and RESULTS.md says so.
#   source .device-kit/setup.sh && bash .ci/gpu/study.sh          (results.db and RESULTS.md in $OUT)
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
bash .ci/gpu/models.sh || exit 1
timeout 470 python -m autoresearch --model /tmp/q27 --suite none --vram 24GiB --emulate-vram \
  --trials 3 --hours 0.06 --finalists 1 --finalist-launches 1 --bench-max-repeats 4 \
  --pin cache_tokens=32768 --pin cache_slots=1 \
  --enqueue max_chunk_size=8192 \
  --enqueue max_chunk_size=4096,EXL3_INT8_GEMV=0 \
  --enqueue max_chunk_size=4096,cache_kind=quant,cache_k_bits=4,cache_v_bits=4,EXL3_QC_STAGING=1 \
  --storage "sqlite:///$out/results.db" --results-md "$out/RESULTS.md" --workdir /tmp/study \
  >"$out/study.log" 2>&1
echo "exit $?"; tail -5 "$out/study.log"
