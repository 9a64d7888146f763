#!/usr/bin/env bash
# Whether the SASS of object files holds an instruction: passes when
# `cuobjdump -sass` of FILE... shows PATTERN (an extended regex), fails when it
# does not, skips (exit 77) where there is no cuobjdump. No GPU needed.
# Usage: scripts/check-sass.sh CUOBJDUMP PATTERN FILE...
set -uo pipefail
cuobjdump=$1 pattern=$2
shift 2
if [ ! -x "$cuobjdump" ]; then
  echo "skipped: no cuobjdump ($cuobjdump); the nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels carry one"
  exit 77
fi
# cuobjdump runs nvdisasm from its own folder or the PATH.
export PATH="$(dirname "$cuobjdump"):$PATH"
sass=$("$cuobjdump" --dump-sass "$@" 2>&1) || { echo "$sass"; exit 1; }
found=$(grep -oE "$pattern" <<<"$sass" | sort | uniq -c)
if [ -z "$found" ]; then
  echo "no '$pattern' in the SASS of $*"
  exit 1
fi
echo "$found"
