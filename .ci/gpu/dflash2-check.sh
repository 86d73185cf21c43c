#!/usr/bin/env bash
# GPU machine (issue #39): DFlash2 on the shape-true 27B under a 24 GiB cap, in one device call of <= ~8 min.
#   source .device-kit/setup.sh && bash .ci/gpu/dflash2-check.sh          (nvidia-h200, carry [".device-kit"])
# 1. writes /tmp/q27-mtp (the 27B with its MTP head, ~15 s) and /tmp/q27-dflash2 (its synthetic DFlash2
#    drafter, ~5 s), once per warm machine;
# 2. serve phase (.ci/gpu/dflash2_check.py, until SERVE_DEADLINE_S=260; ROWS=a,b for those settings alone): `python -m serving` launches of the
#    target alone, + DFlash2, + MTP at cache 32768 and at the largest cache the memory model fits in 24 GiB:
#    predicted against measured peak, decode, the per-round cost of a DFlash2 round against a plain step;
# 3. study phase (until TOTAL_S=470): `python -m autoresearch --draft-model` with the DFlash2 lever enqueued
#    first; state in /tmp/dflash2-study, so a second call on the warm machine resumes it:
#      source .device-kit/setup.sh && PHASES=study bash .ci/gpu/dflash2-check.sh
# Everything lands in $OUT (at most 8 files): progress.log, dflash2-table.md, dflash2-check.json, RESULTS.md,
# results.db, logs.tar.gz (server logs, bench JSON, study log). A part that fails leaves the others' output.
# RANDOM WEIGHTS: the drafter drafts nothing useful; only memory, plumbing and per-round cost are real.
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out" /tmp/mtp-check /tmp/dflash2-check
export OUT=$out
phases=${PHASES:-serve,study}
start=$SECONDS
total=${TOTAL_S:-470}
say() { echo "[$((SECONDS - start))s] $*" | tee -a "$out/progress.log"; }

say "phases $phases"
if [[ $phases == *serve* ]]; then
  PHASES=serve python .ci/gpu/dflash2_check.py; say "serve phase exit $?"
else
  PHASES=none python .ci/gpu/dflash2_check.py; say "checkpoints exit $?"  # writes the checkpoints when missing
fi

if [[ $phases == *study* ]]; then
  state=/tmp/dflash2-study; mkdir -p "$state"
  left=$((total - (SECONDS - start)))
  if (( left < 60 )); then
    say "study: skipped, ${left}s left; run again with PHASES=study"
  else
    say "study: ${left}s (resumes $state/results.db when present)"
    timeout "$left" python -m autoresearch --model /tmp/q27-mtp --draft-model /tmp/q27-dflash2 --suite none \
      --vram 24GiB --emulate-vram --study dflash2-27b --trials "${TRIALS:-4}" --finalists 1 --finalist-launches 1 \
      --no-minimize --no-drift-check --no-levers --bench-max-repeats 2 --bench-decode 1024 --bench-prefill 8192 \
      --bench-decode-tokens 128 --pin cache_slots=1 \
      --enqueue draft_mode=dflash --enqueue draft_mode=dflash,num_draft_tokens=3,max_chunk_size=4096 \
      --storage "sqlite:///$state/results.db" --results-md "$out/RESULTS.md" --workdir /tmp/dflash2-runs \
      >>"$state/study.log" 2>&1
    say "study exit $? (124: stopped at the deadline; run again with PHASES=study to resume)"
    python -c "import sqlite3, sys; sqlite3.connect(sys.argv[1]).backup(sqlite3.connect(sys.argv[2]))" \
      "$state/results.db" "$out/results.db" || say "no results.db to copy"
    grep -E "Trial [0-9]+ (finished|failed)|champion|Error|error:|refused|not launched" "$state/study.log" | tail -20
  fi
fi

tar -czf "$out/logs.tar.gz" -C /tmp dflash2-check mtp-check dflash2-study/study.log \
  $(cd /tmp && ls -d dflash2-runs/*/*.log 2>/dev/null | tail -20) 2>/dev/null || say "some logs missing from logs.tar.gz"
say "done; files in $out: $(ls "$out" | tr '\n' ' ')"
