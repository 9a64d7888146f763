#!/usr/bin/env bash
# Sourced on a GPU machine that has CUDA, CMake and a compiler but none of the
# Debian -dev packages: unpacks the .deb files carried in .gpudeps/ into a
# private prefix and points CMake at it. Usage: source scripts/device-env.sh
prefix=/opt/mxmoe-deps
if [ -d .gpudeps ] && [ ! -f "$prefix/.done" ]; then
  mkdir -p "$prefix"
  for f in .gpudeps/*.deb; do
    if command -v dpkg >/dev/null; then dpkg -x "$f" "$prefix"
    else (d=$(mktemp -d) && cd "$d" && ar x "$OLDPWD/$f" && tar -xf data.tar.* -C "$prefix"); fi
  done
  touch "$prefix/.done"
fi
export CMAKE_PREFIX_PATH="$prefix/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
