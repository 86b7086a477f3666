#!/usr/bin/env bash
# The whole test suite, as CI runs it (after tools/install-deps.sh):
#   1. build/         against LibTorch 2.13 from the pip wheel (the primary build): everything,
#                     tests, examples, benchmarks, packaging, the torch 2.13 oracle tests;
#   2. build-system/  against the system's LibTorch (Debian's libtorch-dev: 1.13 on Debian 12,
#                     2.6 on 13): the test suite (under ASan and UBSan) and examples from
#                     include/, and the oracle tests.
# Both keep their build trees, so a second run only rebuilds what changed (ccache helps a clean one).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${XPORT_JOBS:-2}

cmake -S . -B build -G Ninja -DXPORT_TORCH=wheel
cmake --build build -j"$jobs"
ctest --test-dir build -j"$jobs" --output-on-failure

if [[ "${XPORT_SKIP_SYSTEM_TORCH:-0}" != 1 ]]; then
  cmake -S . -B build-system -G Ninja -DXPORT_TORCH=system -DXPORT_BUILD_BENCHMARKS=OFF -DXPORT_INSTALL=OFF \
        -DXPORT_TEST_SINGLE_HEADER=OFF -DXPORT_SANITIZE_LOAD_TESTS=OFF -DXPORT_SANITIZE_SUITE=ON -DXPORT_FUZZ_SMOKE=OFF \
        -DXPORT_HEADER_TUS=OFF
  cmake --build build-system -j"$jobs"
  ctest --test-dir build-system -j"$jobs" --output-on-failure
fi
