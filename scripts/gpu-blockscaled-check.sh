#!/usr/bin/env bash
# One device call for the Blackwell pipeline on a non-Blackwell GPU: build
# (sm_90a, with CUTLASS's headers carried in build/_deps/cutlass), the
# block-scaled tests with the emulated GEMM, compute-sanitizer memcheck,
# racecheck and synccheck over them, then the whole GPU suite. Logs to $OUT:
# summary.txt, logs.txt.
# Usage (repository root; carry build/_deps/cutlass and .gpudeps):
#   bash scripts/gpu-blockscaled-check.sh
# Env: BUILD_DIR, SKIP_SUITE=1 (only the block-scaled tests).
source scripts/device-env.sh
set -u -o pipefail
OUT=${OUT:-/tmp/gpu-blockscaled-out}
B=${BUILD_DIR:-/tmp/build}
mkdir -p "$OUT"
S="$OUT/summary.txt"
L="$OUT/logs.txt"
: > "$S"
say() { echo "$*" | tee -a "$S"; }
say "date: $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$S"

t0=$(date +%s)
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DMXMOE_CUTLASS_DIR="$PWD/build/_deps/cutlass" -DMXMOE_PYTHON="$(command -v python3)" > "$L" 2>&1 &&
  cmake --build "$B" -j16 >> "$L" 2>&1
rc=$?
say "build: rc=$rc ($(( $(date +%s) - t0 )) s)"
if [ $rc -ne 0 ]; then grep -E "error|FAILED" "$L" | head -30 | tee -a "$S"; exit 1; fi

t0=$(date +%s)
timeout 300 "$B/tests/blockscaled_test" > /tmp/bs.log 2>&1
say "blockscaled_test: rc=$? ($(( $(date +%s) - t0 )) s): $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' /tmp/bs.log | tr '\n' ' ')"
grep -E "Failure|Expected|Which is|rel_l2|skipped:|FAILED" /tmp/bs.log | head -40 | tee -a "$S"
cat /tmp/bs.log >> "$L"

# memcheck over every case of the quick sweep; racecheck and synccheck (slow:
# every shared-memory access is tracked) without the 2880-wide shapes.
for tool in memcheck racecheck synccheck; do
  t0=$(date +%s)
  filter='*'
  [ $tool != memcheck ] && filter='-*GptOss*'
  MXMOE_TEST_QUICK=1 timeout 240 compute-sanitizer --tool $tool --error-exitcode 3 "$B/tests/blockscaled_test" \
    --gtest_filter="$filter" > /tmp/san-$tool.log 2>&1
  say "$tool (blockscaled_test, quick): rc=$? ($(( $(date +%s) - t0 )) s): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/san-$tool.log | tail -1)"
  grep -E "^========= (Invalid|Error|Race|Barrier)" /tmp/san-$tool.log | sort | uniq -c | head -10 | tee -a "$S"
  cat /tmp/san-$tool.log >> "$L"
done

if [ "${SKIP_SUITE:-0}" != 1 ]; then
  t0=$(date +%s)
  ctest --test-dir "$B" -L gpu -j4 --timeout 240 --output-on-failure > /tmp/ctest.log 2>&1
  say "ctest -L gpu: rc=$? ($(( $(date +%s) - t0 )) s): $(grep -E 'tests passed|tests failed' /tmp/ctest.log)"
  grep -E "\(Failed\)|\*\*\*" /tmp/ctest.log | head -20 | tee -a "$S"
  cat /tmp/ctest.log >> "$L"
  t0=$(date +%s)
  timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 "$B/tests/parallel_layer_test" \
    --gtest_filter='*OneRank*' > /tmp/san-par.log 2>&1
  say "memcheck (parallel_layer_test, one rank): rc=$? ($(( $(date +%s) - t0 )) s): $(grep -E 'ERROR SUMMARY' /tmp/san-par.log | tail -1)"
  cat /tmp/san-par.log >> "$L"
fi
