#!/usr/bin/env bash
# GPU machine, real model (../shared/device/real-model builds /tmp/real-model/exl3-4.0): a short study of the
# real Qwen2.5-Coder-0.5B-Instruct with energy per request for every configuration (issue 41, phase 1), then
# the launch-to-launch noise of energy per request beside that of request time (.ci/gpu/energy_noise.py).
# Nothing here touches the GPU's power limit or clocks: the limit the card runs under is what is measured.
#   source .device-kit/setup.sh && bash .ci/gpu/energy-study.sh [more autoresearch flags]
# It must show: an "Energy per request" section in $OUT/RESULTS.md with a J per request for the baseline,
# the champion, the finalists and the front, method nvml_energy_counter (the H200 has the counter), the
# enforced power limit; and from energy_noise.py a J/request for every launch ("N of N launches") and the
# energy spread beside the time spread for the baseline's two launches and each finalist's.
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
state=/tmp/energy-study; mkdir -p "$state"
nvidia-smi --query-gpu=name,power.limit,power.default_limit,clocks.max.sm --format=csv | tee "$out/gpu-power.csv"
timeout "${STUDY_SECONDS:-480}" python -m autoresearch --model /tmp/real-model/exl3-4.0 --suite none --vram 24GiB \
  --trials "${TRIALS:-6}" --finalists 2 --finalist-launches 3 --bench-max-repeats 5 --grace 20 \
  --enqueue draft_mode=ngram --enqueue max_chunk_size=8192 --enqueue cache_kind=quant,cache_k_bits=8,cache_v_bits=8 \
  --storage "sqlite:///$state/results.db" --results-md "$out/RESULTS.md" --workdir /tmp/energy-runs "$@" \
  >>"$out/study.log" 2>&1
echo "exit $?"
python -c "import sqlite3, sys; sqlite3.connect(sys.argv[1]).backup(sqlite3.connect(sys.argv[2]))" \
  "$state/results.db" "$out/results.db"
grep -E "Trial [0-9]+ (finished|failed)|champion|Error|error:" "$out/study.log" | tail -20
sed -n '/^## Energy per request/,/^## /p' "$out/RESULTS.md"
python .ci/gpu/energy_noise.py "$state/results.db"
