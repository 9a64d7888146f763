#!/usr/bin/env bash
# Puts CUTLASS's headers (the nvidia-cutlass wheel from PyPI carries them under
# cutlass_library/source/include) into DIR/include, once. Usage: scripts/install-cutlass.sh DIR
set -euo pipefail
version=4.2.0.0
dir=$1
[ -f "$dir/.version" ] && [ "$(cat "$dir/.version")" = "$version" ] && exit 0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "nvidia-cutlass==$version"
python3 -m zipfile -e "$tmp"/nvidia_cutlass-*.whl "$tmp/x"
rm -rf "$dir"
mkdir -p "$dir"
mv "$tmp/x/cutlass_library/source/include" "$dir/include"
echo "$version" > "$dir/.version"
