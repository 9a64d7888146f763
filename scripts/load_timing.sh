#!/usr/bin/env bash
# Times `mxmoe load` of a gpt-oss-20b-shaped checkpoint (24 layers, 10.2 GB, written by
# bench/checkpoint_load_bench into DIR) onto GPU 0 from a warm and from a cold page cache,
# each beside dd's read rate of the same file in the same call (the cold cache made by
# posix_fadvise DONTNEED, no root needed).
# usage: scripts/load_timing.sh BUILD_DIR [DIR]   (BUILD_DIR holds mxmoe and bench/checkpoint_load_bench)
set -u
B=$1; D=${2:-/tmp/mxmoe_load_ckpt}
F=$D/model.safetensors
[ -f "$F" ] || "$B/bench/checkpoint_load_bench" --gb 10.2 --layer 0 --dir "$D" --keep > /dev/null
drop() { python3 -c "import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)" "$F"; }
ddrate() { dd if="$F" of=/dev/null bs=16M 2>&1 | tail -1; }
echo "file: $(stat -c %s "$F") bytes, $(nproc) cores, $(date -u +%F)"
cat "$F" > /dev/null
echo "warm dd: $(ddrate)"
for i in 1 2; do echo "warm load $i:"; "$B/mxmoe" load --checkpoint "$D" --device 0 2>/dev/null; done
drop; echo "cold dd: $(ddrate)"
drop; echo "cold load:"; "$B/mxmoe" load --checkpoint "$D" --device 0 2>/dev/null
echo "warm load on the cpu backend, 2 layers:"; "$B/mxmoe" load --checkpoint "$D" --layers 0,1 2>/dev/null
