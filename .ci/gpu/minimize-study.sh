#!/usr/bin/env bash
# GPU machine, real model (issue #29; ../shared/device/real-model builds /tmp/real-model/exl3-4.0): a short
# study of the real Qwen2.5-Coder-0.5B-Instruct whose champion carries six changes (the drafting-eos
# champion's n-gram drafting, chunk, cooldown and QKV settings, enqueued), confirmed in fresh launches,
# then minimised on the device: RESULTS.md with "What each change bought" and the TabbyAPI export
# (config.yml, exl3.env, NOT-EXPRESSED.md) come back under $OUT. Decode is timed on the model's own
# answers (bench's corpus, --bench-decode-until eos), as in examples/real-0.5b-own-answers.
# One or more device calls: each stops the loop at STUDY_SECONDS (as a kill would) and copies results.db
# to $OUT; the next call on the warm machine resumes it from /tmp/minimize-study (a minimization replays
# its stored launches and runs only the missing ones), or from .gpu-state/minimize-study/results.db (carry it).
# Launches: a finalist round of 4, then at most MAX_LAUNCHES (default 44) for the minimization (its own
# bound for six changes at two launches each is 2 x (5 x 6 + 1) = 62); about 20 s each on the H200.
#   source .device-kit/setup.sh && bash .ci/gpu/minimize-study.sh [more autoresearch flags]
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
state=/tmp/minimize-study; mkdir -p "$state"
if [ ! -f "$state/results.db" ] && [ -f .gpu-state/minimize-study/results.db ]; then
  cp .gpu-state/minimize-study/results.db "$state/"
fi
db="sqlite:///$state/results.db"
champion="draft_mode=ngram,ngram_match_min=3,num_draft_tokens=10,max_chunk_size=8192,prefill_cooldown=3,EXL3_QKV_SLICE=0"
timeout "${STUDY_SECONDS:-540}" python -m autoresearch --model /tmp/real-model/exl3-4.0 --suite none --vram 24GiB \
  --bench-workload corpus --bench-decode-until eos --bench-decode-tokens 256 --bench-decode 1024 \
  --trials "${TRIALS:-3}" --finalists 1 --finalist-launches 2 --bench-max-repeats 5 --grace 20 \
  --pin cache_kind=fp16 --enqueue "$champion" \
  --minimize --minimize-launches 2 --minimize-max-launches "${MAX_LAUNCHES:-44}" \
  --study minimize-0.5b --storage "$db" --results-md "$out/RESULTS.md" --workdir /tmp/minimize-runs "$@" \
  >>"$state/study.log" 2>&1
echo "exit $?"
cp "$state/study.log" "$out/study.log"
python -c "import sqlite3, sys; sqlite3.connect(sys.argv[1]).backup(sqlite3.connect(sys.argv[2]))" \
  "$state/results.db" "$out/results.db"
if python -m autoresearch export --study minimize-0.5b --storage "$db" --format tabbyapi --out "$out/tabbyapi" \
    >"$out/export.txt" 2>&1; then cat "$out/export.txt"; fi
grep -E "Trial [0-9]+ (finished|failed)|champion|minimiz|Error|error:" "$state/study.log" | tail -30
