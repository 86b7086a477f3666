#!/usr/bin/env bash
# tools/gpu-check.sh: the CUDA checks, for a machine with a GPU and a CUDA build of torch in
# python3 (the lent GPU machine has torch 2.11). Builds the test suite against that torch's
# LibTorch in build-gpu/ and runs the CUDA test cases (they skip themselves without a GPU) and
# the engine's cases; one short script, so it fits one device session.
#   tools/gpu-check.sh            build + run
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
python3 -c 'import torch; assert torch.cuda.is_available(), "no CUDA device"; print("torch", torch.__version__, torch.cuda.get_device_name(0))'
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
      -DXPORT_BUILD_BENCHMARKS=OFF -DXPORT_BUILD_EXAMPLES=OFF > build-gpu.log
cmake --build build-gpu -j"$(nproc)" --target xport_tests >> build-gpu.log
build-gpu/tests/xport_tests -tc='*CUDA*,engine*,cuda graphs*' --test-suite-exclude='oracle*'
