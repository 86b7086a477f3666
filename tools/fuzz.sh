#!/usr/bin/env bash
# Fuzzes xport::load for a fixed time under AddressSanitizer + UndefinedBehaviorSanitizer,
# seeded with archives of real programs.
#   tools/fuzz.sh [seconds=300] [build-dir=build-fuzz]
# Driver: GCC with xport's own coverage-guided driver (default: clang 14 cannot compile LibTorch
# 1.13's headers in C++20 mode, see tests/fuzz/fuzz_load.cpp), or libFuzzer with
# XPORT_FUZZ_CXX=clang++-NN where that compiler can (tools/install-deps.sh --fuzz for clang 14).
# Findings (crash-*) land in <build-dir>/findings/; the corpus grows in <build-dir>/corpus/.
set -euo pipefail
seconds=${1:-300}
build=${2:-build-fuzz}
cxx=${XPORT_FUZZ_CXX:-g++}
root=$(cd "$(dirname "$0")/.." && pwd)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$cxx" \
  -DXPORT_FUZZ=ON -DXPORT_BUILD_TESTS=OFF -DXPORT_BUILD_BENCHMARKS=OFF -DXPORT_BUILD_EXAMPLES=OFF \
  -DXPORT_INSTALL=OFF >/dev/null
cmake --build "$build" --target fuzz_load
mkdir -p "$build/corpus" "$build/findings"
export ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=0:max_allocation_size_mb=2048
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
XPORT_FUZZ_WRITE_SEEDS="$build/corpus" "$build/tests/fuzz_load"
"$build/tests/fuzz_load" -max_total_time="$seconds" -artifact_prefix="$build/findings/" "$build/corpus"
