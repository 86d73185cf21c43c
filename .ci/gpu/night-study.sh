#!/usr/bin/env bash
# GPU machine, real model (../shared/device/real-model builds /tmp/real-model/exl3-4.0) and the eval stack
# (.ci/gpu/eval-install.sh), issues #38/#46 and #45: the README's "On your GPU" command on the real 0.5B with --hours 0.25
# and a planted lossy cache (--enqueue cache_kind=quant,cache_k_bits=8,cache_v_bits=5: the fidelity gate must reject it)
# must end, champion judged and minimized, within 15 minutes + 10% of wall time, writing RESULTS.md's
# "The night as run" table (each stage planned against measured; what the deadline cut).
# One device call may run 10 minutes, so each call runs the loop for at most STUDY_SECONDS, stopping it with
# Ctrl-C (SIGINT, as a user would) and copying results.db and RESULTS.md to $OUT; the next call on the warm
# machine resumes the same night (the same --hours: the calls' wall times add up in the study). Call it
# twice (three times at most) back to back; it appends each call's wall time to /tmp/night-study/wall.txt
# and prints the sum, which must be <= 990 s, and the night-as-run table:
#   source .device-kit/setup.sh && source .ci/gpu/eval-install.sh && bash .ci/gpu/night-study.sh
# Once the loop ends (exit 0) it also writes the TabbyAPI export (tabbyapi-export/, export.log) with its gate verdict.
# Commit $OUT (RESULTS.md, results.db, study.log, wall.txt, tabbyapi-*) under examples/real-0.5b-night/.
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
state=/tmp/night-study; mkdir -p "$state"
started=$(date +%s)
timeout -s INT "${STUDY_SECONDS:-560}" python -m autoresearch --suite offline --model /tmp/real-model/exl3-4.0 \
  --hours 0.25 --vram 24GiB --emulate-vram --pin cache_tokens=32768 --grace 20 \
  --enqueue cache_kind=quant,cache_k_bits=8,cache_v_bits=5 \
  --storage "sqlite:///$state/results.db" --results-md "$state/RESULTS.md" --workdir /tmp/night-runs "$@" \
  >>"$state/study.log" 2>&1
code=$?
echo "$(( $(date +%s) - started ))" >>"$state/wall.txt"
echo "exit $code; wall seconds per call: $(tr '\n' ' ' <"$state/wall.txt"); sum $(awk '{s+=$1} END {print s}' "$state/wall.txt")"
python -c "import sqlite3, sys; sqlite3.connect(sys.argv[1]).backup(sqlite3.connect(sys.argv[2]))" \
  "$state/results.db" "$out/results.db"
cp "$state/study.log" "$state/wall.txt" "$out/" 2>/dev/null; cp "$state"/RESULTS*.* "$out/" 2>/dev/null
if [ "$code" -eq 0 ]; then  # the night ended: the champion as TabbyAPI's config, with its gate verdict (#37)
  python -m autoresearch export --storage "sqlite:///$state/results.db" --format tabbyapi --out "$state/tabbyapi-export" \
    >"$out/export.log" 2>&1; echo "export exit $?"; tail -5 "$out/export.log"
  for f in "$state"/tabbyapi-export/*; do cp "$f" "$out/tabbyapi-$(basename "$f")"; done  # flat: $OUT keeps few folders
  head -30 "$out/tabbyapi-config.yml" 2>/dev/null
  python .ci/gpu/energy_noise.py "$state/results.db" >"$out/energy-noise.txt" 2>&1; tail -15 "$out/energy-noise.txt"  # #41
fi
grep -E "the search stops|minimization|champion:|Error|error:" "$state/study.log" | tail -12
sed -n '/## The night as run/,/## Provenance/p' "$state/RESULTS.md" 2>/dev/null
