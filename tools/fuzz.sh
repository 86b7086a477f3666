#!/usr/bin/env bash
# Fuzzes xport for a fixed time under AddressSanitizer + UndefinedBehaviorSanitizer, seeded
# with real programs. XPORT_FUZZ_TARGET picks what the bytes are fed to: `load` (whole .pt2
# archives, the default), `sym` (size expressions, str() and srepr text) or `json` (a program's
# JSON alone). ctest runs each for a fixed number of executions (tests/CMakeLists.txt, fuzz_*).
#   tools/fuzz.sh [seconds=300] [build-dir=build-fuzz]
# Driver: GCC with xport's own coverage-guided driver (default; see tests/fuzz/fuzz_load.cpp), or
# libFuzzer with XPORT_FUZZ_CXX=clang++-16 against LibTorch 2.13 (tools/install-deps.sh --fuzz
# installs it; clang 14 lacks std::source_location's builtin, and cannot compile LibTorch 1.13's
# headers in C++20 mode).
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
export XPORT_FUZZ_TARGET=${XPORT_FUZZ_TARGET:-load}
corpus="$build/corpus-$XPORT_FUZZ_TARGET" findings="$build/findings-$XPORT_FUZZ_TARGET"
mkdir -p "$corpus" "$findings"
export ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=0:max_allocation_size_mb=2048
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
if [[ "$cxx" == clang* ]]; then target_flag=(); else target_flag=(-target="$XPORT_FUZZ_TARGET"); fi
XPORT_FUZZ_WRITE_SEEDS="$corpus" "$build/tests/fuzz_load" "${target_flag[@]}"
"$build/tests/fuzz_load" "${target_flag[@]}" -max_total_time="$seconds" -artifact_prefix="$findings/" "$corpus"
