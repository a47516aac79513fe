#!/usr/bin/env bash
# The benchmark peers, in build/bench-venv: llama-cpp-python compiled from source for this
# machine's CPU (GGML_NATIVE=ON), never a prebuilt wheel, so that llama.cpp gets the same
# instruction set as deepinfer's -march=native build. Safe to run again: an existing build is kept
# (pass --rebuild to compile again, e.g. after moving to another CPU). Compiling takes several
# minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$(realpath "${BASH_SOURCE[0]}")")/.."

version=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}  # the version the committed results were made with
venv=build/bench-venv
rebuild=0
[[ ${1:-} == --rebuild ]] && rebuild=1

if [[ ! -x $venv/bin/python ]]; then
  python3 -m venv "$venv"
fi
if ((!rebuild)) && "$venv/bin/python" -c "import llama_cpp, numpy, sys; sys.exit(llama_cpp.__version__ != '$version')" 2>/dev/null; then
  echo "llama-cpp-python $version is already built in $venv"
  exit 0
fi
# --no-cache-dir: pip caches the wheels it compiles, and a wheel compiled for another CPU must
# not come back from that cache.
pip_args=(--disable-pip-version-check --no-cache-dir --no-binary llama-cpp-python)
((rebuild)) && pip_args+=(--force-reinstall)
CMAKE_ARGS="-DGGML_NATIVE=ON" CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
  "$venv/bin/python" -m pip install "${pip_args[@]}" numpy "llama-cpp-python==$version"
"$venv/bin/python" -c "import llama_cpp; print('llama-cpp-python', llama_cpp.__version__, '|', llama_cpp.llama_print_system_info().decode())"
