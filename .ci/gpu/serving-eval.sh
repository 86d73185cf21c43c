#!/usr/bin/env bash
# GPU machine, one device call: serving's GPU tests, the server-overhead ratio, the fidelity record.
#   source .device-kit/setup.sh && bash .ci/gpu/serving-eval.sh     (results in $OUT)
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
bash .ci/gpu/models.sh || exit 1
EXL3_TINY_MODEL=/tmp/tiny-exl3 EXL3_27B_MODEL=/tmp/q27 timeout 240 \
  python -m pytest -m gpu tests/serving/test_gpu.py -q -s -p no:cacheprovider >"$out/serving-gpu-tests.log" 2>&1
tail -3 "$out/serving-gpu-tests.log"
echo '{"engine": "exllamav3", "args": {"cache_tokens": 32768, "cache_slots": 1}}' >/tmp/overhead.json
timeout 240 python -m benchmarks.overhead --model /tmp/q27 --config /tmp/overhead.json --vram-limit 24GiB \
  --repeats 3 --rounds 2 --new-tokens 200 --json "$out/overhead.json" 2>&1 | tail -2
c=eval/fidelity_configs
timeout 200 python -m autoresearch sweep --model /tmp/tiny-exl3 --baseline $c/baseline.json \
  --candidate kv8=$c/kv8.json --candidate kv4=$c/kv4.json --candidate kv2=$c/kv2.json \
  --candidate int8_gemv2=$c/int8_gemv2.json --long-context-tokens 4000,11000 \
  --db "sqlite:///$out/fidelity.db" --log-dir /tmp/fidelity-logs >"$out/fidelity.log" 2>&1
tail -12 "$out/fidelity.log"
