#!/usr/bin/env bash
# tools/gpu-stage.sh: run here, before a device session. The lent GPU machine has CMake, ninja, GCC 13
# and a CUDA torch, but no Debian packages: this copies what the build finds with find_package
# (nlohmann-json, doctest: header-only; Google Benchmark: headers and its shared library, built for
# x86-64 Linux) with their CMake configs into .gpu-deps/usr (ignored by git), for `carry`:
#   tools/gpu-stage.sh
#   device run: carry [".gpu-deps"], command "tools/gpu-check.sh"
set -euo pipefail
cd "$(dirname "$0")/.."
d=.gpu-deps/usr
rm -rf .gpu-deps
mkdir -p "$d/include" "$d/share/cmake" "$d/lib/cmake" "$d/lib/x86_64-linux-gnu/cmake"
cp -r /usr/include/nlohmann /usr/include/doctest /usr/include/benchmark "$d/include/"
cp -r /usr/share/cmake/nlohmann_json "$d/share/cmake/"
cp -r /usr/lib/cmake/doctest "$d/lib/cmake/"
cp -r /usr/lib/x86_64-linux-gnu/cmake/benchmark "$d/lib/x86_64-linux-gnu/cmake/"
cp -P /usr/lib/x86_64-linux-gnu/libbenchmark.so* /usr/lib/x86_64-linux-gnu/libbenchmark_main.a "$d/lib/x86_64-linux-gnu/"
du -sh .gpu-deps
