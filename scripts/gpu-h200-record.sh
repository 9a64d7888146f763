#!/usr/bin/env bash
# The H200 runs that docs/PERF.md records, in one or two device calls: build
# (sm_90a, with the torch op against the machine's torch), the power ceilings
# (idle, HBM read stream, bf16 and FP8 GEMMs), transformers with and without
# mxmoe, the `mxmoe bench` sweep of the sm90 backend (burst and --power-s 0.5),
# the GPU C++ suite, and compute-sanitizer over the portable and sm90 tests.
# Each stage is skipped (and says so) once DEADLINE_S seconds have passed since
# the start, so a call ends inside its limit; a later call on the same machine
# reuses the build in BUILD_DIR.
# Usage (repository root): bash scripts/gpu-h200-record.sh STAGE...
#   stages: build ceilings transformers bench shards ctest sanitizers (in the order given)
# Env: BUILD_DIR (default /tmp/build), OUT (default /tmp/gpu-h200-out),
#      DEADLINE_S (default 540), BENCH_MODEL (default all: gpt-oss-20b and 120b).
# $OUT gets summary.txt, logs.txt, power_ceilings.txt, transformers.{txt,json},
# bench-sm90.{txt,json} and bench-sm90-tp{2,4,8}.{txt,json}: more than the 8
# files a device call returns, so a call names the stages whose files it needs.
source scripts/device-env.sh
set -u -o pipefail
OUT=${OUT:-/tmp/gpu-h200-out}
B=${BUILD_DIR:-/tmp/build}
DEADLINE_S=${DEADLINE_S:-540}
mkdir -p "$OUT"
S="$OUT/summary.txt"
L="$OUT/logs.txt"
touch "$S" "$L"
start=$(date +%s)
PY=$(command -v python3)
say() { echo "$*" | tee -a "$S"; }
left() { echo $(( DEADLINE_S - ($(date +%s) - start) )); }
# fits NEED: true when at least NEED seconds are left before the deadline.
fits() { if [ "$(left)" -ge "$1" ]; then return 0; fi; say "$2: skipped ($(left) s left, needs $1)"; return 1; }
limit() { local l; l=$(( $(left) - 5 )); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }

say "== $(date -u +%FT%TZ) stages: $*"
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,memory.total --format=csv,noheader | tee -a "$S"

stage_build() {
  if [ -x "$B/tests/sm90_test" ] && [ -x "$B/mxmoe" ] && [ -f "$B/python/libmxmoe_torch.so" ] &&
     [ -x "$B/bench/power_ceilings" ]; then
    say "build: reused $B"
    return 0
  fi
  fits 150 build || return 1
  local t0 rc
  t0=$(date +%s)
  say "python: $($PY -c 'import sys, torch, transformers; print(sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__)')"
  { cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a -DMXMOE_PYTHON="$PY" &&
    timeout "$(limit 400)" cmake --build "$B" -j16; } >> "$L" 2>&1
  rc=$?
  say "build: rc=$rc ($(( $(date +%s) - t0 )) s)"
  if [ $rc -ne 0 ]; then grep -E "error|Error" "$L" | head -20 | tee -a "$S"; return 1; fi
}

stage_ceilings() {
  fits 40 ceilings || return 1
  local t0=$(date +%s)
  timeout "$(limit 90)" "$B/bench/power_ceilings" --window-s 1 --warmup-s 1 > "$OUT/power_ceilings.txt" 2>&1
  say "power_ceilings: rc=$? ($(( $(date +%s) - t0 )) s)"
  tee -a "$S" < "$OUT/power_ceilings.txt"
}

stage_transformers() {
  fits 90 transformers || return 1
  local t0=$(date +%s)
  MXMOE_LIBRARY="$B/python/libmxmoe_torch.so" PYTHONPATH="$PWD/python" PYTHONUNBUFFERED=1 \
    timeout "$(limit 240)" $PY bench/transformers_gpt_oss.py --layers 2 --prefill 2048 \
    --checkpoint-dir /tmp/gpt_oss_2l --json "$OUT/transformers.json" > "$OUT/transformers.txt" 2>&1
  say "transformers_gpt_oss: rc=$? ($(( $(date +%s) - t0 )) s)"
  grep -v -E "^(Loading|Warning)" "$OUT/transformers.txt" | tail -25 | tee -a "$S"
}

stage_bench() {
  fits 60 bench || return 1
  local t0=$(date +%s)
  timeout "$(limit 200)" "$B/mxmoe" bench --model "${BENCH_MODEL:-all}" --backend sm90 --power-s 0.5 \
    --json "$OUT/bench-sm90.json" > "$OUT/bench-sm90.txt" 2>&1
  say "bench sm90 --power-s 0.5: rc=$? ($(( $(date +%s) - t0 )) s)"
  tee -a "$S" < "$OUT/bench-sm90.txt"
}

# One GPU's share of each model under tensor parallel (I = 1440, 736, 384 at
# TP 2, 4, 8), each point timed in its own graph and chained.
stage_shards() {
  local tp t0
  for tp in 2 4 8; do
    fits 45 "shards TP$tp" || return 1
    t0=$(date +%s)
    timeout "$(limit 150)" "$B/mxmoe" bench --model "${BENCH_MODEL:-all}" --backend sm90 --tp-shard $tp \
      --json "$OUT/bench-sm90-tp$tp.json" > "$OUT/bench-sm90-tp$tp.txt" 2>&1
    say "bench sm90 --tp-shard $tp: rc=$? ($(( $(date +%s) - t0 )) s)"
    tee -a "$S" < "$OUT/bench-sm90-tp$tp.txt"
  done
}

# Four tests at a time: each spends most of its time in its CPU reference.
stage_ctest() {
  fits 60 ctest || return 1
  local t0=$(date +%s)
  timeout "$(limit 300)" ctest --test-dir "$B" -L gpu -j4 --timeout 240 --output-on-failure > /tmp/ctest.log 2>&1
  say "ctest -L gpu: rc=$? ($(( $(date +%s) - t0 )) s): $(grep -E 'tests passed|tests failed' /tmp/ctest.log)"
  grep -E "\(Failed\)|\(Timeout\)|Not Run|\*\*\*" /tmp/ctest.log | head -20 | tee -a "$S"
  cat /tmp/ctest.log >> "$L"
}

# compute-sanitizer, the runs side by side (each is bound by its own
# instrumentation, and the GPU has room for all): memcheck over the portable
# suite and the reduced sm90 sweep, racecheck and synccheck over the kernels
# that use shared memory and barriers (reduced sweeps, as scripts/gpu-check.sh).
stage_sanitizers() {
  fits 60 sanitizers || return 1
  local t0=$(date +%s) lim name
  lim=$(limit 400)
  local -a jobs=(
    "memcheck-portable|memcheck||portable_test|"
    "memcheck-sm90|memcheck|1|sm90_test|"
    "memcheck-grouping|memcheck||grouping_test|"
    "memcheck-router|memcheck||router_test|"
    "memcheck-device-layer|memcheck|1|device_layer_test|"
    "racecheck-sm90|racecheck|1|sm90_test|*SmallShape*:*OddShape*:*GptOss*"
    "synccheck-sm90|synccheck|1|sm90_test|*SmallShape*:*OddShape*:*GptOss*"
    "racecheck-portable|racecheck|1|portable_test|*SmallShape*:*OddShape*:*GptOssHidden*:*FusedRouter*:*PerPairDecode*:*DecodeGemm2*"
    "synccheck-portable|synccheck|1|portable_test|*SmallShape*:*OddShape*:*GptOssHidden*:*FusedRouter*:*PerPairDecode*:*DecodeGemm2*"
    "racecheck-grouping|racecheck||grouping_test|"
    "synccheck-grouping|synccheck||grouping_test|"
    "racecheck-router|racecheck||router_test|"
    "synccheck-router|synccheck||router_test|"
  )
  local pids=() j
  for j in "${jobs[@]}"; do
    IFS='|' read -r name tool quick bin filter <<< "$j"
    (
      # The tests' CPU references use OpenMP: a few threads each, as the runs share 16 cores.
      export MXMOE_TEST_QUICK=${quick:-0} OMP_NUM_THREADS=2
      t1=$(date +%s)
      timeout "$lim" compute-sanitizer --tool "$tool" --error-exitcode 3 "$B/tests/$bin" \
        ${filter:+--gtest_filter="$filter"} > "/tmp/san-$name.log" 2>&1
      rc=$?
      echo "$tool ($bin${quick:+, quick}${filter:+, filtered}): rc=$rc ($(( $(date +%s) - t1 )) s): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "/tmp/san-$name.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED) ' "/tmp/san-$name.log" | tr '\n' ' ')" > "/tmp/san-$name.sum"
    ) &
    pids+=($!)
  done
  wait "${pids[@]}"
  for j in "${jobs[@]}"; do
    name=${j%%|*}
    say "$(cat "/tmp/san-$name.sum")"
    { echo "==== $name"; cat "/tmp/san-$name.log"; } >> "$L"
  done
  say "sanitizers: ($(( $(date +%s) - t0 )) s)"
}

for st in "$@"; do
  if ! "stage_$st"; then
    say "stage $st did not complete"
    if [ "$st" = build ]; then break; fi  # nothing after it has binaries to run
  fi
done
say "== done ($(( $(date +%s) - start )) s)"
