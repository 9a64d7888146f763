#!/usr/bin/env bash
# Installs (as root) or names (otherwise) the Debian packages mxmoe builds with.
# nvcc is optional: without it the CUDA backends are left out of the build.
set -euo pipefail
packages=(cmake ninja-build g++ make libgtest-dev libcli11-dev nlohmann-json3-dev libfmt-dev
          libpng-dev clang libclang-rt-14-dev python3-numpy)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
  echo "installing: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "missing Debian packages: ${missing[*]}" >&2
  echo "install them with: sudo apt-get install ${missing[*]}" >&2
  exit 1
fi
