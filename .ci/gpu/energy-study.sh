#!/usr/bin/env bash
# GPU machine, real model (../shared/device/real-model builds /tmp/real-model/exl3-4.0): a short study of the
# real Qwen2.5-Coder-0.5B-Instruct with energy per request for every configuration (issue 41, phase 1), then
# the launch-to-launch noise of energy per request beside that of request time (.ci/gpu/energy_noise.py).
# Nothing here touches the GPU's power limit or clocks: the limit the card runs under is what is measured.
#   source .device-kit/setup.sh && bash .ci/gpu/energy-study.sh [more autoresearch flags]
#   source .device-kit/setup.sh && RANK_BY=energy bash .ci/gpu/energy-study.sh     # phase 2: --rank-by energy
# It must show: an "Energy per request" section in $OUT/RESULTS.md with a J per request for the baseline,
# the champion, the finalists and the front, method nvml_energy_counter (the H200 has the counter), the
# enforced power limit; and from energy_noise.py a J/request for every launch ("N of N launches") and the
# energy spread beside the time spread for the baseline's two launches and each finalist's.
# With RANK_BY=energy it must also show: "Ranked by energy per request on the workload (--rank-by energy)"
# in RESULTS.md, a champion line "energy per request on the workload N.NNNx the baseline's ... Request time on
# the workload, from the same launches by the same estimator ...: ...", each finalist's decision in energy's words ("less
# energy" / "more energy" / "not shown to use less energy", with its interval), and a non-empty stored
# energy floor (the baseline's two launches; printed below) beside the speed floor; and the champion minimized
# on energy (issue 41): study.log's "minimal champion: K of N changes kept (L launches of at most 6)", and
# RESULTS.md's "What each change bought (minimization)" with the column "energy per request without it", the
# verdicts "less energy" / "more energy" / "not shown to use less energy", kept rows saying "measurably more
# energy per request than the champion", and "energy per request against the champion in its last attempt"
# where a removal was taken. A minimization launch without an energy reading would say so in its row, never 0 J.
# The minimization is bounded (one launch per configuration, at most 6: MINIMIZE_MAX_LAUNCHES) to end inside
# STUDY_SECONDS; "stopped at that bound" in its section is expected with three or more changes.
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
rank_by=${RANK_BY:-time}
state=/tmp/energy-study-$rank_by; mkdir -p "$state"  # one study per database: energy_noise.py reads the one
nvidia-smi --query-gpu=name,power.limit,power.default_limit,clocks.max.sm --format=csv | tee "$out/gpu-power.csv"
timeout "${STUDY_SECONDS:-540}" python -m autoresearch --model /tmp/real-model/exl3-4.0 --suite none --vram 24GiB \
  --trials "${TRIALS:-6}" --finalists 2 --finalist-launches 3 --bench-max-repeats 5 --grace 20 \
  --enqueue draft_mode=ngram --enqueue max_chunk_size=8192 --enqueue cache_kind=quant,cache_k_bits=8,cache_v_bits=8 \
  --rank-by "$rank_by" --study "energy-$rank_by" \
  --minimize --minimize-launches "${MINIMIZE_LAUNCHES:-1}" --minimize-max-launches "${MINIMIZE_MAX_LAUNCHES:-6}" \
  --storage "sqlite:///$state/results.db" --results-md "$out/RESULTS.md" --workdir /tmp/energy-runs "$@" \
  >>"$out/study.log" 2>&1
echo "exit $?"
python -c "import sqlite3, sys; sqlite3.connect(sys.argv[1]).backup(sqlite3.connect(sys.argv[2]))" \
  "$state/results.db" "$out/results.db"
grep -E "Trial [0-9]+ (finished|failed)|champion|Error|error:" "$out/study.log" | tail -20
grep -E "^minimal champion:|minimization" "$out/study.log" | tail -5
grep -E "^Ranked by|^\*\*(trial [0-9]+|the baseline)\*\*|^Its energy per request" "$out/RESULTS.md"
sed -n '/^## Finalists, re-measured/,/^## /p' "$out/RESULTS.md"
sed -n '/^## Energy per request/,/^## /p' "$out/RESULTS.md"
sed -n '/^## What each change bought/,/^## /p' "$out/RESULTS.md"
python - "$state/results.db" <<'PY'
import json, sys, optuna
url = f"sqlite:///{sys.argv[1]}"
study = optuna.load_study(study_name=optuna.get_all_study_names(url)[0], storage=url)
evidence = study.user_attrs.get("baseline_evidence") or {}
print("ranked_by:", study.user_attrs.get("ranked_by"))
print("speed floor:", json.dumps(evidence.get("speed_floor")))
print("energy floor:", json.dumps(evidence.get("energy_floor")))
PY
python .ci/gpu/energy_noise.py "$state/results.db"
