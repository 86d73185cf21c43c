#!/usr/bin/env bash
# GPU machine, after the .device-eval parts were received into /tmp/eval-wheels (one call each; see
# .ci/gpu/eval-wheels.sh for the closure and why datasets/pyarrow/pandas stay behind: the offline
# suite never imports them). Source it after .device-kit/setup.sh.
stamp=/tmp/site/.eval-$(ls /tmp/eval-wheels | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    /tmp/eval-wheels/*.whl || return 1
  touch "$stamp"
fi
python3 -W ignore -c 'import verifiers.v1, math_verify, reasoning_gym, mmath; print("eval stack:", verifiers.__version__ if hasattr(verifiers, "__version__") else "verifiers", reasoning_gym.__name__)' || return 1
