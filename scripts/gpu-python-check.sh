#!/usr/bin/env bash
# One device call for the engine-facing layer and the torch op: build (sm_90a)
# with the torch op against the machine's torch, the GPU C++ suite, the pytest
# suite on CUDA, memcheck of the layer, allocator and op tests, the op's
# eager host overhead and its graph-replay time against `mxmoe bench`, and
# from_tensors' preparation time on CUDA tensors.
# Logs to $OUT: summary.txt, logs.txt, op_timing.txt, prepare_timing.txt.
# Usage (repository root): bash scripts/gpu-python-check.sh
# Env: BUILD_DIR, SKIP_CTEST=1, SKIP_TIMING=1, SKIP_SANITIZER=1; BASE_DIR: the
# source tree of an earlier version (e.g. `git archive` of it, unpacked), whose
# torch op is built beside (in the background, while the tests run) and timed
# in turns with this one: the same machine, so the two can be compared.
source scripts/device-env.sh
set -u -o pipefail
OUT=${OUT:-/tmp/gpu-python-out}
B=${BUILD_DIR:-/tmp/build}
mkdir -p "$OUT"
S="$OUT/summary.txt"
L="$OUT/logs.txt"
: > "$S"
say() { echo "$*" | tee -a "$S"; }
say "date: $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$S"
PY=$(command -v python3)
say "python: $($PY -c 'import sys, torch, transformers; print(sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__)')"

t0=$(date +%s)
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a -DMXMOE_PYTHON="$PY" > "$L" 2>&1 &&
  cmake --build "$B" -j16 >> "$L" 2>&1
rc=$?
say "build: rc=$rc ($(( $(date +%s) - t0 )) s)"
if [ $rc -ne 0 ]; then tail -40 "$L"; exit 1; fi
export MXMOE_LIBRARY="$B/python/libmxmoe_torch.so" PYTHONPATH="$PWD/python"
BASE=${BASE_DIR:-}
if [ -n "$BASE" ]; then
  (cd "$BASE" && cmake -S . -B /tmp/build-base -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
     -DMXMOE_PYTHON="$PY" -DMXMOE_TESTS=OFF && cmake --build /tmp/build-base -j8 --target mxmoe_torch) \
    > /tmp/build-base.log 2>&1 &
  base_build=$!
fi

if [ "${SKIP_CTEST:-0}" != 1 ]; then
t0=$(date +%s)
ctest --test-dir "$B" -L gpu --timeout 240 --output-on-failure > /tmp/ctest.log 2>&1
say "ctest -L gpu: rc=$? ($(( $(date +%s) - t0 )) s): $(grep -E 'tests passed|tests failed' /tmp/ctest.log)"
grep -E "Failed|\*\*\*" /tmp/ctest.log | head -20 | tee -a "$S"
cat /tmp/ctest.log >> "$L"
fi

t0=$(date +%s)
(cd tests/python && timeout 400 $PY -m pytest -q -rs -p no:cacheprovider . > /tmp/pytest.log 2>&1)
say "pytest (CPU and CUDA): rc=$? ($(( $(date +%s) - t0 )) s): $(tail -1 /tmp/pytest.log)"
grep -E "^FAILED|^ERROR" /tmp/pytest.log | head -20 | tee -a "$S"
cat /tmp/pytest.log >> "$L"

if [ "${SKIP_TIMING:-0}" != 1 ]; then
# In turns with the earlier version where there is one: each its own scripts and package.
base_ok=0
if [ -n "$BASE" ]; then
  wait $base_build && base_ok=1
  say "base build ($BASE): $([ $base_ok = 1 ] && echo ok || (tail -5 /tmp/build-base.log; echo FAILED))"
fi
run_version() {  # which (this | base) script args...
  local which=$1; shift
  if [ "$which" = base ]; then
    (cd "$BASE" && MXMOE_LIBRARY=/tmp/build-base/python/libmxmoe_torch.so PYTHONPATH="$BASE/python" "$@")
  else
    "$@"
  fi
}
for round in 1 2; do
  for which in this $([ $base_ok = 1 ] && echo base); do
    t0=$(date +%s)
    echo "== $which, round $round" >> "$OUT/prepare_timing.txt"
    run_version $which timeout 200 $PY scripts/prepare_timing.py >> "$OUT/prepare_timing.txt" 2>&1
    say "prepare timing ($which, round $round): rc=$? ($(( $(date +%s) - t0 )) s)"
    t0=$(date +%s)
    echo "== $which, round $round" >> "$OUT/op_timing.txt"
    run_version $which timeout 200 $PY scripts/op_timing.py >> "$OUT/op_timing.txt" 2>&1
    say "op timing ($which, round $round): rc=$? ($(( $(date +%s) - t0 )) s)"
  done
done
cat "$OUT/prepare_timing.txt" "$OUT/op_timing.txt" | tee -a "$S"
for T in 1 64 4096; do
  timeout 100 "$B/mxmoe" bench --model gpt-oss-20b --backend sm90 --tokens $T >> "$OUT/op_timing.txt" 2>&1
done
grep -E "^ *[0-9]+ " "$OUT/op_timing.txt" | tail -3 | tee -a "$S"
fi

if [ "${SKIP_SANITIZER:-0}" != 1 ]; then
  t0=$(date +%s)
  timeout 300 compute-sanitizer --tool memcheck --error-exitcode 3 "$B/tests/device_layer_test" > /tmp/san-layer.log 2>&1
  say "memcheck (device_layer_test): rc=$? ($(( $(date +%s) - t0 )) s): $(grep -E 'ERROR SUMMARY' /tmp/san-layer.log | tail -1)"
  cat /tmp/san-layer.log >> "$L"
  t0=$(date +%s)
  timeout 300 compute-sanitizer --tool memcheck --error-exitcode 3 "$B/tests/device_allocator_test" > /tmp/san-alloc.log 2>&1
  say "memcheck (device_allocator_test): rc=$? ($(( $(date +%s) - t0 )) s): $(grep -E 'ERROR SUMMARY' /tmp/san-alloc.log | tail -1)"
  cat /tmp/san-alloc.log >> "$L"
  t0=$(date +%s)
  (cd tests/python && timeout 400 compute-sanitizer --tool memcheck --error-exitcode 3 \
     $PY -m pytest -q -p no:cacheprovider -k "(cuda and not compiles) or (memory and not fills_the_device)" \
     test_moe.py test_cuda_memory.py > /tmp/san-py.log 2>&1)
  say "memcheck (op tests, CUDA): rc=$? ($(( $(date +%s) - t0 )) s): $(grep -E 'ERROR SUMMARY' /tmp/san-py.log | tail -1) $(grep -E 'passed|failed' /tmp/san-py.log | tail -1)"
  cat /tmp/san-py.log >> "$L"
fi
