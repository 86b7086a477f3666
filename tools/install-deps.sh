#!/usr/bin/env bash
# Installs what xport needs to build, test and benchmark, from Debian 12's archive only.
# Run as root (or through sudo). Idempotent: installed packages are left as they are.
set -euo pipefail
packages=(
  cmake ninja-build g++ python3 ccache
  libtorch-dev          # LibTorch 1.13 (CPU), find_package(Torch)
  doctest-dev           # tests
  libbenchmark-dev      # bench/
  nlohmann-json3-dev    # .pt2 archives (JSON)
  python3-torch         # tools/check_pt2.py: reads our .pt2 archives from Python (torch 1.13)
)
# --fuzz: also clang 14 and its libFuzzer runtime (tools/fuzz.sh)
if [[ "${1:-}" == "--fuzz" ]]; then packages+=(clang-14 libclang-rt-14-dev); fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
