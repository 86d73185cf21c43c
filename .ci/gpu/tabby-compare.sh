#!/usr/bin/env bash
# GPU machine, real model (issue #29's last "Must show"): TabbyAPI itself (.device-tabby/tabbyAPI, its public
# source; its missing dependencies as wheels in .device-tabby/wheels) serving the real 0.5B with the study's
# `export --format tabbyapi` config.yml + exl3.env, against this project's server with the exported (minimal)
# champion, each measured by `python -m bench` with the study's own bench plan, in fresh launches alternated
# within one call so drift hits both alike. Why: the export claims TabbyAPI runs what the loop measured;
# this measures whether it does (request time within 5%), and where not, why. Where TabbyAPI cannot express
# the champion (NOT-EXPRESSED.md), "subset" runs exactly TabbyAPI's config on our server: tabby/subset is
# then the servers' own difference, subset/ours what the unexpressed settings buy. TabbyAPI reports no
# server timings, so every rate here is client-timed (prefill too) and request time is the study's request
# mix at those rates. TabbyAPI does not call exllamav3's warmup(): bench's discarded warm-ups stand in.
# Run from the repository's root (.device-tabby carried: see its COMMIT), after the kit:
#   source /tmp/kit/setup.sh && bash .ci/gpu/tabby-compare.sh [DB [STUDY]]
# DB/STUDY default to examples/real-0.5b-levers (lever-study); BUDGET (s, default 200) stops new launches;
# MODEL (default /tmp/real-model/exl3-4.0). $OUT: table.md, compare.json, bench-records.json, configs.txt,
# tabby.log, ours.log, run.log. Exit 1 with the reason when any side was not measured (no ratio then).
set -uo pipefail
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
out=${OUT:-/tmp/out}; mkdir -p "$out"
db=$(realpath "${1:-examples/real-0.5b-levers/results.db}"); study=${2:-lever-study}; model=${MODEL:-/tmp/real-model/exl3-4.0}
work=/tmp/tabby-compare; rm -rf "$work"; mkdir -p "$work"; start=$SECONDS
tabby=$PWD/.device-tabby/tabbyAPI; port_t=18731; port_o=18741  # apart: TabbyAPI moves to port+1 when its port is busy
exec > >(tee -a "$out/run.log") 2>&1
fail() { echo "FAILED: $*"; collect; exit 1; }
collect() {
  tail -n 300 "$work"/tabby-*.log >"$out/tabby.log" 2>/dev/null; tail -n 300 "$work"/ours-*.log "$work"/subset-*.log >"$out/ours.log" 2>/dev/null
  { for f in tabby-config.yml tabby-export/exl3.env tabby-export/NOT-EXPRESSED.md champion.json subset.json \
      bench-args v1-model.json; do [ -f "$work/$f" ] && echo "== $f" && cat "$work/$f"; done
    echo "== TabbyAPI commit: $(cat .device-tabby/COMMIT 2>/dev/null)"; } >"$out/configs.txt"
}
[ -d "$tabby" ] && ls .device-tabby/wheels/*.whl >/dev/null || fail ".device-tabby/{tabbyAPI,wheels} not here (carry .device-tabby)"
[ -d "$model" ] || fail "no model at $model"
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/tabby-site .device-tabby/wheels/*.whl \
  || fail "installing .device-tabby/wheels"
tpath=/tmp/tabby-site:/tmp/site  # TabbyAPI's modules, its wheels, the kit (exllamav3, fastapi, pydantic, uvicorn)
(cd "$tabby" && PYTHONPATH=$tpath python3 -c 'import backends.exllamav3.model, endpoints.server, common.tabby_config') \
  || fail "TabbyAPI's modules do not import here (a dependency missing from the kit, the image or .device-tabby/wheels)"
python -m autoresearch export --study "$study" --storage "sqlite:///$db" --format tabbyapi --out "$work/tabby-export" \
  && python -m autoresearch export --study "$study" --storage "sqlite:///$db" --out "$work/champion.json" \
  && python .ci/gpu/tabby_compare.py prepare "$work" "$db" "$study" "$model" "$port_t" || fail "export/prepare"
sub=; [ -f "$work/subset.json" ] && sub=subset  # TabbyAPI cannot express the champion: measure its subset here too
stop() { kill -TERM "$1" 2>/dev/null; for _ in $(seq 60); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.5; done; kill -KILL "$1"; }
launch() {  # arm round: start the server, wait until healthy, bench, stop
  local arm=$1 r=$2 pid url model_arg=() log=$work/$1-$2.log
  if [ "$arm" = tabby ]; then
    url=http://127.0.0.1:$port_t; model_arg=(--model "$(basename "$model")")
    (cd "$tabby" && set -a && . "$work/tabby-export/exl3.env" && set +a && \
      exec env PYTHONPATH=$tpath COLUMNS=200 python3 main.py --config "$work/tabby-config.yml") >"$log" 2>&1 &
  else
    url=http://127.0.0.1:$port_o; cfg=$work/champion.json; [ "$arm" = subset ] && cfg=$work/subset.json
    python -m serving --model "$model" --config "$cfg" --host 127.0.0.1 --port "$port_o" >"$log" 2>&1 &
  fi
  pid=$!
  if python .ci/gpu/tabby_compare.py wait "$url" "$pid" "${STARTUP_SECONDS:-120}"; then
    [ "$arm" = tabby ] && { python .ci/gpu/tabby_compare.py check-tabby "$url" "$work/tabby-config.yml" \
      >"$work/v1-model.json" || { stop "$pid"; fail "TabbyAPI did not load config.yml as written (configs.txt)"; }; }
    # shellcheck disable=SC2046
    timeout "${BENCH_SECONDS:-150}" python -m bench --url "$url" "${model_arg[@]}" $(cat "$work/bench-args") --json "$work/bench-$arm-$r.json" \
      >"$work/bench-$arm-$r.txt" 2>&1; echo "$arm #$r: bench exit $? at $((SECONDS - start)) s"
    grep -E "^(decode|prefill)_tok_per_s_client@" "$work/bench-$arm-$r.txt"
  else
    echo "$arm #$r: server not ready (log tail below)"; tail -n 15 "$log"
  fi
  stop "$pid"
}
budget=${BUDGET:-200}; longest=0  # the first round always; a later launch only if it fits in BUDGET seconds
for run in tabby:0 ours:0 ${sub:+$sub:0} ours:1 tabby:1 ${sub:+$sub:1} tabby:2 ours:2; do
  arm=${run%:*}; r=${run#*:}; t0=$SECONDS
  if [ "$r" -gt 0 ] && [ $((SECONDS - start + longest)) -gt "$budget" ]; then echo "budget: no $arm #$r"; continue; fi
  launch "$arm" "$r"; [ $((SECONDS - t0)) -gt "$longest" ] && longest=$((SECONDS - t0))
done
collect
python .ci/gpu/tabby_compare.py table "$work" "$db" "$study" "$out" || fail "a side was not measured: no ratio"
echo "done in $((SECONDS - start)) s"
