#!/usr/bin/env bash
# Your machine, from the project's root: the size of each call of .ci/gpu/STRETCH.md (tracked tree, untracked
# files git does not ignore, and the carried paths), refusing any over the 64 MiB a device call may carry.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
tree=$( { git ls-files -z; git ls-files -z --others --exclude-standard; } | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
limit=$((64 * 1024 * 1024)); bad=0
check() {  # name, carried paths...
  local name=$1; shift; local size=$tree
  for p in "$@"; do
    [ -e "$p" ] || { echo "$name: $p is missing (see STRETCH.md: prepare it first)"; bad=1; continue; }
    size=$((size + $(du -sb "$p" | cut -f1)))
  done
  printf '%-10s %5.1f MiB  %s\n' "$name" "$(echo "$size / 1048576" | bc -l)" "$*"
  [ "$size" -le "$limit" ] || { echo "  over 64 MiB"; bad=1; }
}
check call-1 .device-kit/prebuilt
check call-2 .device-kit/wheels .device-kit/setup.sh .device-models/exl3
for d in .device-models/part-*; do check "part ${d##*-}" "$d"; done
last=$(ls -d .device-models/part-* | tail -1)
check "part+conv" "$last" .device-models/convert  # the converter travels with the last part
for d in .device-eval/part-*; do check "eval ${d##*-}" "$d"; done
check minimize .gpu-state/lever-study
check tabby .device-tabby .gpu-state/lever-study
exit $bad
