#!/usr/bin/env bash
# Puts CUTLASS's headers (the nvidia-cutlass wheel from PyPI carries them under
# cutlass_library/source/include) into DIR/include, and its host utilities (the
# reference GEMMs, under cutlass_library/source/tools/util/include) into
# DIR/tools/util/include, as in a CUTLASS checkout; once. Usage: scripts/install-cutlass.sh DIR
set -euo pipefail
version=4.2.0.0
dir=$1
[ -f "$dir/.version" ] && [ "$(cat "$dir/.version")" = "$version" ] && [ -d "$dir/tools/util/include" ] && exit 0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "nvidia-cutlass==$version"
python3 -m zipfile -e "$tmp"/nvidia_cutlass-*.whl "$tmp/x"
rm -rf "$dir"
mkdir -p "$dir/tools/util"
mv "$tmp/x/cutlass_library/source/include" "$dir/include"
mv "$tmp/x/cutlass_library/source/tools/util/include" "$dir/tools/util/include"
echo "$version" > "$dir/.version"
