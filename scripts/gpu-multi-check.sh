#!/usr/bin/env bash
# One call on a machine with 2+ GPUs: build (sm_90a, reusing $BUILD_DIR when it
# was configured from this checkout), the multi-GPU layer's GPU tests, the
# 1-rank cases under compute-sanitizer memcheck, and `mxmoe bench --tp 2` and
# `--ep 2` for gpt-oss-20b and -120b (random weights; --backend auto, so tensor
# parallel runs sm90 on SM90 GPUs). Stays under 8 minutes:
# each step's time limit is cut to what is left. Logs go to $OUT (7 files).
# Usage (repository root): bash scripts/gpu-multi-check.sh
# Env: BUILD_DIR (default /tmp/build), OUT (default /tmp/gpu-multi-check-out),
#      BENCH_TOKENS (default 1,16,256,4096,16384), BENCH_ITERATIONS (default 40).
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off: it can take shared GPUs out of service
source scripts/device-env.sh
set -u -o pipefail
OUT=${OUT:-/tmp/gpu-multi-check-out}
B=${BUILD_DIR:-/tmp/build}
mkdir -p "$OUT"
S="$OUT/summary.txt"
: > "$S"
say() { echo "$*" | tee -a "$S"; }
start=$(date +%s)
left() { echo $(( start + 470 - $(date +%s) )); }
# Time limit of a step: at most $1 seconds, no more than what is left, at
# least 1 (timeout 0 would mean no limit).
limit() { local l; l=$(left); [ "$l" -lt 1 ] && l=1; [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }

say "date: $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader | tee -a "$S"
nvidia-smi topo -m 2>&1 | tee -a "$S"
say "NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"

# A build directory configured from another checkout cannot be reused.
if [ -f "$B/CMakeCache.txt" ] && ! grep -q "^CMAKE_HOME_DIRECTORY:INTERNAL=$PWD\$" "$B/CMakeCache.txt"; then
  B=$B-multi
fi
t0=$(date +%s)
timeout "$(limit 300)" cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
  > "$OUT/build.log" 2>&1 &&
  timeout "$(limit 300)" cmake --build "$B" -j "$(nproc)" --target mxmoe_cli parallel_layer_test >> "$OUT/build.log" 2>&1
rc=$?
say "build ($B): rc=$rc ($(( $(date +%s) - t0 )) s); $(grep -o 'multi-GPU layer (NCCL): [A-Z]*' "$OUT/build.log" | tail -1)"
if [ $rc -ne 0 ]; then tail -40 "$OUT/build.log"; exit 1; fi

T=$B/tests/parallel_layer_test
t0=$(date +%s)
timeout "$(limit 180)" "$T" > "$OUT/tests.log" 2>&1
say "tests: rc=$? ($(( $(date +%s) - t0 )) s): $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$OUT/tests.log" | tr '\n' ' ')"
grep -E '^\[  FAILED  \] ParallelGpu|test skipped:' "$OUT/tests.log" | sort -u | tee -a "$S"

t0=$(date +%s)
# NCCL's own start-up probes kernels it has no image for and handles the API
# error; --report-api-errors no keeps those out (memory errors still count).
MXMOE_TEST_QUICK=1 timeout "$(limit 120)" compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 "$T" \
  --gtest_filter='ParallelGpu.OneRankTensorAndExpert:ParallelGpu.TensorParallelSm90OneRank:ParallelGpu.DispatchKernelsMatchTheHostPlan' \
  > "$OUT/memcheck.log" 2>&1
say "memcheck (1 rank TP and EP, 1 rank TP on sm90; dispatch kernels): rc=$? ($(( $(date +%s) - t0 )) s):" \
  "$(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"

: > "$OUT/bench.txt"
for mode in tp ep; do
  t0=$(date +%s)
  timeout "$(limit 150)" "$B/mxmoe" bench --model all --$mode 2 --tokens "${BENCH_TOKENS:-1,16,256,4096,16384}" \
    --iterations "${BENCH_ITERATIONS:-40}" --json "$OUT/bench-${mode}2.json" >> "$OUT/bench.txt" 2>> "$S"
  say "bench --$mode 2: rc=$? ($(( $(date +%s) - t0 )) s)"
done
cat "$OUT/bench.txt"
say "total: $(( $(date +%s) - start )) s"
