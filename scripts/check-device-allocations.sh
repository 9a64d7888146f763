#!/usr/bin/env bash
# Whether every device allocation of the library goes through its allocator
# (include/mxmoe/allocator.h): no object file but the default allocator's
# (cuda_malloc_allocator.cpp.o) refers to a CUDA allocation call, and that
# one does. Usage: scripts/check-device-allocations.sh ARCHIVE_OR_OBJECT...
# (CTest's ;-separated object lists are split).
set -uo pipefail
calls='^(cudaMalloc|cudaMallocAsync|cudaMallocManaged|cudaMallocPitch|cudaMalloc3D|cudaMallocFromPoolAsync|cuMemAlloc[A-Za-z_0-9]*|cuMemCreate)$'
files=()
for arg in "$@"; do
  IFS=';' read -r -a parts <<<"$arg"
  files+=("${parts[@]}")
done
# "file[member]: U symbol" for every undefined symbol (-A names the member of an archive).
refs=$(nm -A -u "${files[@]}" 2>/dev/null | awk '{ sub(/:$/, "", $1); print $1, $NF }' | awk -v re="$calls" '$2 ~ re')
default=$(grep -E 'cuda_malloc_allocator\.cpp\.o' <<<"$refs")
others=$(grep -vE 'cuda_malloc_allocator\.cpp\.o' <<<"$refs" | grep . )
if [ -n "$others" ]; then
  echo "device memory taken beside the allocator (src/api/cuda_malloc_allocator.cpp is the only place):"
  echo "$others"
  exit 1
fi
if ! grep -q ' cudaMalloc$' <<<"$default"; then
  echo "cuda_malloc_allocator.cpp.o does not call cudaMalloc: is this the library's CUDA build?"
  exit 1
fi
echo "$(wc -w <<<"${files[*]}") files: cudaMalloc only in the default allocator"
