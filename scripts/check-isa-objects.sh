#!/usr/bin/env bash
# Whether each CPU kernel path's object file (cpu_<isa>_kernels.cpp.o, compiled
# with its own -m flags) defines one global symbol, its kernel table
# (mxmoe::cpu::<isa>_kernels()): any other, such as an inline function emitted
# as a weak symbol, could be merged by the linker into code that runs on CPUs
# without that instruction set. Usage: scripts/check-isa-objects.sh OBJECT... (or one ;-separated list)
set -uo pipefail
checked=0
# CTest passes a target's objects as one ;-separated argument.
objects=()
for arg in "$@"; do
  IFS=';' read -r -a parts <<<"$arg"
  objects+=("${parts[@]}")
done
for obj in "${objects[@]}"; do
  case "$obj" in *cpu_*_kernels.cpp.o) ;; *) continue ;; esac
  isa=$(basename "$obj" .cpp.o); isa=${isa#cpu_}; isa=${isa%_kernels}
  [ "$isa" = avx512vnni ] && isa=avx512_vnni
  # DW.ref.__gxx_personality_v0 is data, not code: the address of the C++
  # unwinder's routine, which an object with a thread_local destructor
  # (cpu_amx_kernels.cpp's packing buffer) refers to the same in every object.
  globals=$(nm -C --defined-only --extern-only "$obj" | awk '{ $1 = ""; $2 = ""; sub(/^  /, ""); print }' |
    grep -vx 'DW.ref.__gxx_personality_v0')
  if [ "$globals" != "mxmoe::cpu::${isa}_kernels()" ]; then
    echo "$obj defines, besides or instead of mxmoe::cpu::${isa}_kernels():"
    echo "$globals"
    exit 1
  fi
  checked=$((checked + 1))
done
[ "$checked" -eq 5 ] || { echo "expected the 5 CPU kernel paths' objects, found $checked"; exit 1; }
echo "the $checked CPU kernel paths' objects each define only their kernel table"
