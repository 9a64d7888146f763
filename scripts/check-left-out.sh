#!/usr/bin/env bash
# A build that leaves the Blackwell GEMMs out, in its own build folder: with
# nvcc, -DMXMOE_CUTLASS=OFF and CUDA code for 120a alone (sm120's target is
# compiled, its GEMM is not: "built without CUTLASS"; sm90 and sm100 lack their
# targets); without nvcc, CPU code only ("built without nvcc"). Its dispatch
# tests, `mxmoe info` and mxmoe.info() must each say which backends are not
# built, and why; pytest also reads the library's machine code (sm_120a code,
# no block-scaled MMA). Only what those need is compiled (the library, the CLI,
# the torch op, dispatch_test), so it stays cheap on a 2-core CI machine.
# Usage: scripts/check-left-out.sh PYTHON (a Python with torch and pytest)
set -euo pipefail
py="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"  # the venv's own, not its target
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${LEFT_OUT_BUILD:-$root/build-left-out}"

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMXMOE_CUTLASS=OFF -DCMAKE_CUDA_ARCHITECTURES=120a \
  -DMXMOE_PYTHON="$py" | grep "mxmoe: CUTLASS"
cmake --build "$build" --target dispatch_test mxmoe_cli mxmoe_torch -j "$(nproc)"
ctest --test-dir "$build" --output-on-failure -R '^(Dispatch\.|cli\.info)'
cd "$root/tests/python"
# The package from the source tree, on the library of that build.
PYTHONPATH="$root/python" MXMOE_LIBRARY="$build/python/libmxmoe_torch.so" "$py" -m pytest -q -rs -p no:cacheprovider -k info test_moe.py
