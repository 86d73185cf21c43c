#!/usr/bin/env bash
# Your machine, from the project's root: the device kit every GPU script sources. The shared
# defaults plus httptools and uvloop (uvicorn[standard]: the server's HTTP protocol with its header
# deadline needs httptools, and a server without it exits at start). For the task tier add the eval
# stack: bash .ci/gpu/eval-wheels.sh (it runs this too).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
../shared/device/prepare httptools==0.9.0 uvloop==0.23.0 "$@"
