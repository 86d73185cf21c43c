#!/usr/bin/env bash
# GPU machine: the synthetic checkpoints the GPU checks use (kept in /tmp while the machine is warm).
#   source .device-kit/setup.sh && bash .ci/gpu/models.sh [tiny] [tiny-exl3] [q27]     (default: all three)
set -euo pipefail
log=${OUT:-/tmp}/models.log
want=" ${*:-tiny tiny-exl3 q27} "
if [[ $want == *" tiny "* || $want == *" tiny-exl3 "* ]]; then
  [ -f /tmp/tiny/SYNTHETIC.json ] || python -m serving.synthetic tiny /tmp/tiny >>"$log" 2>&1
fi
if [[ $want == *" tiny-exl3 "* && ! -f /tmp/tiny-exl3/config.json ]]; then
  python -m serving.synthetic exl3-input /tmp/tiny /tmp/tiny-in >>"$log" 2>&1
  python -m exllamav3.conversion.convert_model -i /tmp/tiny-in -o /tmp/tiny-exl3 -w /tmp/tiny-work \
    -b 4.0 -hb 6 -cr 16 -cc 256 >>"$log" 2>&1
fi
if [[ $want == *" q27 "* ]]; then
  [ -f /tmp/q27/SYNTHETIC.json ] || python -m serving.synthetic qwen3.8-27b /tmp/q27 >>"$log" 2>&1
fi
echo "models ready:$want"
