#!/usr/bin/env bash
# GPU machine: bench reproduces ../shared/device/README.md's table on the shape-true 27B, all six rows
# on one GPU in two device calls issued back to back (the machine, /tmp/q27 and the kernel caches stay
# warm 30 s after a call), then the server's prefill against a direct Generator on that same GPU.
#   source .device-kit/setup.sh && bash .ci/gpu/bench-table.sh 1     (fp16 rows: defaults, chunk 4096, chunk 8192)
#   source .device-kit/setup.sh && bash .ci/gpu/bench-table.sh 2     (cache 8/8, cache 4/4, EXL3_INT8_GEMV=0; overhead)
# Results in $OUT: one bench JSON per row (with NVML clocks, power, throttle reasons), the pytest log,
# the GPU's identity and, in part 2, benchmarks.overhead's direct-vs-server JSON at chunk 4096.
# Then `python -m bench reference` checks every row JSON in $OUT and in .gpu-state/bench-table/ (copy
# part 1's JSONs there and carry it into part 2) against the table, up to one machine factor.
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
export TRITON_CACHE_DIR=/tmp/triton-cache  # survives between calls while the machine is warm
nvidia-smi --query-gpu=name,uuid,driver_version,power.limit,clocks.max.sm,clocks.max.mem,temperature.gpu \
  --format=csv >"$out/gpu-$1.csv" 2>&1
bash .ci/gpu/models.sh q27 || exit 1
case $1 in
  1) rows="defaults or fp16 or chunk8192" ;;
  2) rows="cache8 or cache4 or int8gemv0" ;;
  *) echo "part must be 1 or 2" >&2; exit 2 ;;
esac
BENCH_OUT=$out EXL3_27B_MODEL=/tmp/q27 timeout "${ROWS_SECONDS:-520}" python -m pytest -m gpu \
  tests/bench/test_gpu_table.py -s -p no:cacheprovider -k "$rows" >"$out/table-$1.log" 2>&1
echo "table part $1: exit $?"
grep -E "^(chunk|defaults)|passed|failed" "$out/table-$1.log"
if [ "$1" = 2 ]; then
  echo '{"engine": "exllamav3", "args": {"max_chunk_size": 4096}}' >/tmp/overhead-4096.json
  timeout "${OVERHEAD_SECONDS:-200}" python -m benchmarks.overhead --model /tmp/q27 --config /tmp/overhead-4096.json \
    --vram-limit 24GiB --repeats 3 --rounds 1 --new-tokens 128 --prefill-tokens 8192 \
    --json "$out/overhead-4096.json" 2>&1 | tail -3
fi
rows=()
for f in "$out"/bench-*.json .gpu-state/bench-table/bench-*.json; do
  [ -f "$f" ] && rows+=("$(basename "$f" .json | sed 's/^bench-//')=$f")
done
python -m bench reference examples/bench-table-h200/reference.json "${rows[@]}" --json "$out/reference-check.json" \
  >"$out/reference-check.txt" 2>&1
echo "reference check: exit $?"; tail -4 "$out/reference-check.txt"
