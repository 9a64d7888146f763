#!/usr/bin/env bash
# One device call: build (sm_90a only), GPU tests (portable and sm90),
# compute-sanitizer, SASS and resource checks of both GEMMs, benchmark. Logs go to $OUT: summary.txt, logs.txt (build,
# tests, sanitizer), sass.txt, bench.{txt,json,png}; two of the 8 files a
# device call returns are left for extra measurements.
# Usage (repository root): bash scripts/gpu-check.sh
# Env: BUILD_DIR (default /tmp/build), SKIP_SANITIZER=1, SKIP_BENCH=1,
#      BENCH_BACKEND (default portable; sm90 times the wgmma backend, whose
#      configuration per T `mxmoe info` prints), BENCH_ARGS (extra `mxmoe bench` flags),
#      OUT (default /tmp/gpu-check-out).
source scripts/device-env.sh
set -u -o pipefail
OUT=${OUT:-/tmp/gpu-check-out}
B=${BUILD_DIR:-/tmp/build}
mkdir -p "$OUT"
S="$OUT/summary.txt"
: > "$S"
say() { echo "$*" | tee -a "$S"; }
say "date: $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader | tee -a "$S"

t0=$(date +%s)
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a > "$OUT/logs.txt" 2>&1 &&
  cmake --build "$B" -j16 >> "$OUT/logs.txt" 2>&1
rc=$?
say "build: rc=$rc ($(( $(date +%s) - t0 )) s)"
if [ $rc -ne 0 ]; then tail -40 "$OUT/logs.txt"; exit 1; fi

# Registers, shared memory, spills of every kernel (from the object files).
{
  echo "== cuobjdump -res-usage (portable kernels)"
  for o in $(find "$B/src" -name '*.cu.o'); do cuobjdump -res-usage "$o" 2>&1 | grep -A1 "Function" ; done
  echo "== ptxas -v of the GEMM instances"
  : > /tmp/gemm.sass
  for f in sm80_mxfp4_gemm; do
    nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v --expt-relaxed-constexpr -Iinclude -Isrc \
      -c src/cuda/portable/$f.cu -o /tmp/$f.o 2>&1 | grep -E "Compiling|registers|spill"
    cuobjdump --dump-sass /tmp/$f.o >> /tmp/gemm.sass 2>&1
  done
  echo "== SASS instruction counts (GEMM)"
  for op in HMMA PRMT HMUL2 HFMA2 LDG LDGSTS STG LDL STL BAR; do
    echo "$op: $(grep -cE "\b$op" /tmp/gemm.sass)"
  done
  echo "== SASS of the decode GEMM1 instance"
  awk '/Function : .*gemmILi1ELb1E/{p=1} p&&/Function : /&&!/gemmILi1ELb1E/{p=0} p' /tmp/gemm.sass
  echo "== ptxas -v of the sm90 (wgmma) GEMM instances"
  nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v --expt-relaxed-constexpr -Iinclude -Isrc \
    -c src/cuda/sm90/sm90_mxfp4_gemm.cu -o /tmp/sm90_gemm.o > /tmp/sm90_ptxas.log 2>&1
  grep -E "Compiling|registers|spill|warn|C75" /tmp/sm90_ptxas.log
  cuobjdump --dump-sass /tmp/sm90_gemm.o > /tmp/sm90_gemm.sass 2>&1
  echo "== SASS instruction counts (sm90 GEMM)"
  for op in HGMMA WARPGROUP.ARRIVE WARPGROUP.DEPBAR UBLKCP SYNCS LDS HMUL2 STG LDL STL; do
    echo "$op: $(grep -cE "\b$op" /tmp/sm90_gemm.sass)"
  done
  echo "== SASS of the sm90 128-token GEMM1 instance"
  awk '/Function : .*gemmILi128ELb1E/{p=1} p&&/Function : /&&!/gemmILi128ELb1E/{p=0} p' /tmp/sm90_gemm.sass
} > "$OUT/sass.txt" 2>&1
say "HMMA in SASS: $(grep -c HMMA /tmp/gemm.sass)  local-memory ops (LDL/STL): $(grep -cE '\b(LDL|STL)' /tmp/gemm.sass)"
# The sm90 GEMM must run on wgmma (HGMMA; an HMMA-only SASS is the slow path),
# keep every register array in registers, and keep its wgmmas asynchronous
# (ptxas C7511, C7512, ...: "wgmma.mma_async instructions are serialized",
# for want of registers or for another reason).
sm90_hgmma=$(grep -c HGMMA /tmp/sm90_gemm.sass)
sm90_local=$(grep -cE '\b(LDL|STL)' /tmp/sm90_gemm.sass)
sm90_serial=$(grep -c 'wgmma.mma_async instructions are serialized' /tmp/sm90_ptxas.log)
sm90_sass=ok
if [ "$sm90_hgmma" -eq 0 ] || [ "$sm90_local" -ne 0 ] || [ "$sm90_serial" -ne 0 ]; then sm90_sass=FAIL; fi
say "sm90 GEMM SASS: HGMMA $sm90_hgmma, local-memory ops (LDL/STL) $sm90_local, serialised wgmma (C751x) $sm90_serial: $sm90_sass"

t0=$(date +%s)
ctest --test-dir "$B" -L gpu --timeout 180 --output-on-failure > /tmp/ctest.log 2>&1
rc=$?
cat /tmp/ctest.log >> "$OUT/logs.txt"
say "ctest -L gpu: rc=$rc ($(( $(date +%s) - t0 )) s): $(grep -E 'tests passed|tests failed' /tmp/ctest.log)"

if [ "${SKIP_SANITIZER:-0}" != 1 ]; then
  t0=$(date +%s)
  MXMOE_TEST_QUICK=1 timeout 300 compute-sanitizer --tool memcheck --error-exitcode 3 "$B/tests/sm90_test" \
    > /tmp/sanitizer-sm90.log 2>&1
  say "memcheck (sm90, quick): rc=$? ($(( $(date +%s) - t0 )) s): $(grep -E 'ERROR SUMMARY' /tmp/sanitizer-sm90.log | tail -1)"
  for tool in racecheck synccheck; do
    t0=$(date +%s)
    MXMOE_TEST_QUICK=1 timeout 200 compute-sanitizer --tool $tool --error-exitcode 3 "$B/tests/sm90_test" \
      --gtest_filter='*SmallShape*:*OddShape*:*GptOss*' >> /tmp/sanitizer-sm90.log 2>&1
    say "$tool (sm90, quick): rc=$? ($(( $(date +%s) - t0 )) s): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/sanitizer-sm90.log | tail -1)"
  done
  cat /tmp/sanitizer-sm90.log >> "$OUT/logs.txt"
  for t in grouping router; do
    for tool in memcheck racecheck synccheck; do
      t0=$(date +%s)
      timeout 200 compute-sanitizer --tool $tool --error-exitcode 3 "$B/tests/${t}_test" > /tmp/sanitizer-$t.log 2>&1
      say "$tool ($t): rc=$? ($(( $(date +%s) - t0 )) s): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/sanitizer-$t.log | tail -1)"
      cat /tmp/sanitizer-$t.log >> "$OUT/logs.txt"
    done
  done
  # The eager graphs (memcheck; no kernels of their own) and the device
  # preparation (its check kernels use a barrier and atomics: all three tools,
  # on the small and odd shapes).
  t0=$(date +%s)
  timeout 200 compute-sanitizer --tool memcheck --error-exitcode 3 "$B/tests/eager_graphs_test" \
    > /tmp/sanitizer-eager.log 2>&1
  say "memcheck (eager_graphs): rc=$? ($(( $(date +%s) - t0 )) s): $(grep -E 'ERROR SUMMARY' /tmp/sanitizer-eager.log | tail -1)"
  cat /tmp/sanitizer-eager.log >> "$OUT/logs.txt"
  for tool in memcheck racecheck synccheck; do
    t0=$(date +%s)
    timeout 200 compute-sanitizer --tool $tool --error-exitcode 3 "$B/tests/device_prepare_test" \
      --gtest_filter='*SmallOdd*:*NaNScale*:*NonFinite*:*DevicePointers*' > /tmp/sanitizer-prepare.log 2>&1
    say "$tool (device_prepare): rc=$? ($(( $(date +%s) - t0 )) s): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/sanitizer-prepare.log | tail -1)"
    cat /tmp/sanitizer-prepare.log >> "$OUT/logs.txt"
  done
  T=$B/tests/portable_test
  t0=$(date +%s)
  timeout 300 compute-sanitizer --tool memcheck --error-exitcode 3 "$T" > /tmp/sanitizer.log 2>&1
  say "memcheck (full suite): rc=$? ($(( $(date +%s) - t0 )) s): $(grep -E 'ERROR SUMMARY' /tmp/sanitizer.log | tail -1)"
  for tool in racecheck synccheck; do
    t0=$(date +%s)
    MXMOE_TEST_QUICK=1 timeout 200 compute-sanitizer --tool $tool --error-exitcode 3 "$T" \
      --gtest_filter='*SmallShape*:*OddShape*:*GptOssHidden*:*FusedRouter*:*PerPairDecode*' >> /tmp/sanitizer.log 2>&1
    say "$tool (quick): rc=$? ($(( $(date +%s) - t0 )) s): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/sanitizer.log | tail -1)"
  done
  cat /tmp/sanitizer.log >> "$OUT/logs.txt"
fi

if [ "${SKIP_BENCH:-0}" != 1 ]; then
  t0=$(date +%s)
  timeout 400 "$B/mxmoe" bench --backend "${BENCH_BACKEND:-portable}" ${BENCH_ARGS:-} \
    --json "$OUT/bench.json" --png "$OUT/bench.png" > "$OUT/bench.txt" 2>> "$S"
  say "bench: rc=$? ($(( $(date +%s) - t0 )) s)"
  cat "$OUT/bench.txt"
fi
cat "$S"
