#!/usr/bin/env bash
# GPU machine: the synthetic checkpoints every GPU check uses (kept in /tmp while the machine is warm).
#   source .device-kit/setup.sh && bash .ci/gpu/models.sh
set -euo pipefail
log=${OUT:-/tmp}/models.log
[ -f /tmp/tiny/SYNTHETIC.json ] || python -m serving.synthetic tiny /tmp/tiny >>"$log" 2>&1
if [ ! -f /tmp/tiny-exl3/config.json ]; then
  python -m serving.synthetic exl3-input /tmp/tiny /tmp/tiny-in >>"$log" 2>&1
  python -m exllamav3.conversion.convert_model -i /tmp/tiny-in -o /tmp/tiny-exl3 -w /tmp/tiny-work \
    -b 4.0 -hb 6 -cr 16 -cc 256 >>"$log" 2>&1
fi
[ -f /tmp/q27/SYNTHETIC.json ] || python -m serving.synthetic qwen3.8-27b /tmp/q27 >>"$log" 2>&1
echo "models ready: /tmp/tiny /tmp/tiny-exl3 /tmp/q27"
