#!/usr/bin/env bash
# Builds the safetensors header fuzzer with clang (libFuzzer + ASan + UBSan) in
# its own build dir and runs it for SECONDS (default 60) from a small seed corpus
# generated here. Exits non-zero when the fuzzer finds a crash, leak or timeout.
#   usage: scripts/fuzz.sh [SECONDS]
set -euo pipefail
seconds="${1:-60}"
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${FUZZ_BUILD:-$root/build-fuzz}"

CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DMXMOE_CUDA=OFF -DMXMOE_TESTS=OFF -DMXMOE_FUZZ=ON >/dev/null
# Only the fuzz target: it compiles the parser sources, not the library.
cmake --build "$build" --target safetensors_header_fuzz -j "$(nproc)"

seeds="$build/fuzz-seeds"
corpus="$build/fuzz-corpus"
mkdir -p "$seeds" "$corpus"
# A safetensors file: 8-byte LE header length, JSON header, data.
seed() {  # seed NAME JSON DATA_BYTES
  local json="$2" n
  n=${#json}
  {
    printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x\\x00\\x00\\x00\\x00' \
      $((n & 255)) $(((n >> 8) & 255)) $(((n >> 16) & 255)) $(((n >> 24) & 255)))"
    printf '%s' "$json"
    head -c "$3" /dev/zero | tr '\0' '\177'
  } >"$seeds/$1"
}
seed empty '{}' 0
seed meta '{"__metadata__":{"format":"pt"}}' 0
seed one_u8 '{"a":{"dtype":"U8","shape":[2,3],"data_offsets":[0,6]}}' 6
seed two '{"w":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]},"s":{"dtype":"U8","shape":[2,2],"data_offsets":[8,12]}}' 12
seed gptoss '{"__metadata__":{"format":"pt"},"block.0.mlp.mlp1_weight.blocks":{"dtype":"U8","shape":[1,2,1,16],"data_offsets":[0,32]},"block.0.mlp.mlp1_weight.scales":{"dtype":"U8","shape":[1,2,1],"data_offsets":[32,34]},"block.0.mlp.mlp1_bias":{"dtype":"BF16","shape":[1,2],"data_offsets":[34,38]}}' 40
seed overlap '{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}' 8

cd "$build"
# The fuzzer's progress lines go to a log; a finding prints its tail.
log="$build/fuzz.log"
if ! "$build/fuzz/safetensors_header_fuzz" "$corpus" "$seeds" \
    -dict="$root/fuzz/safetensors.dict" -max_total_time="$seconds" -max_len=4096 \
    -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1; then
  tail -n 60 "$log"
  echo "fuzz: the safetensors header fuzzer found a problem (log: $log)" >&2
  exit 1
fi
echo "fuzz: safetensors header parser, ${seconds} s, $(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$') inputs, no finding"
