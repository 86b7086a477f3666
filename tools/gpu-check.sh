#!/usr/bin/env bash
# tools/gpu-check.sh: the CUDA checks, in one command that fits a device session (8 minutes on the
# lent H200: 16 cores, GCC 13, a CUDA build of torch in python3). Stage the dependencies here first
# (tools/gpu-stage.sh), then on the device: carry [".gpu-deps"], command "tools/gpu-check.sh".
#   1. builds, with the machine's GCC 13 and the project's -Werror, the test files that hold CUDA
#      cases (xport_tests_dev; test_control_flow.cpp for the CUDA autocast block) and bench/bench_cuda, against that torch's LibTorch, in build-gpu/;
#   2. runs every CUDA case, the engine's cases and the CUDA graphs' cases;
#   3. runs bench_cuda: eager C++ (NoGradGuard), the interpreter, the engine and the engine with
#      CUDA graphs at batch 1 and 32 on a GPT-2 block, ResNet-18, an encoder layer, a dense MoE.
# Logs go to $OUT (the device tool's returned folder) or gpu-logs/: build.log, tests.log, bench.json.
set -uo pipefail
cd "$(dirname "$0")/.."
logs=${OUT:-gpu-logs}
mkdir -p "$logs"
start=$SECONDS
prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
python3 -c 'import torch; assert torch.cuda.is_available(), "no CUDA device"; print("torch", torch.__version__, torch.cuda.get_device_name(0))' | tee "$logs/device.txt" || exit 1
export LD_LIBRARY_PATH="$PWD/.gpu-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix;$PWD/.gpu-deps/usr" \
      -DXPORT_BUILD_EXAMPLES=OFF -DXPORT_HEADER_TUS=OFF \
      -DXPORT_DEV_TESTS="test_cuda_graphs.cpp;test_engine.cpp;test_run.cpp;test_custom_ops.cpp;test_serde.cpp;test_control_flow.cpp" \
      > "$logs/build.log" 2>&1 || { tail -30 "$logs/build.log"; exit 1; }
cmake --build build-gpu -j"$(nproc)" --target xport_tests_dev bench_cuda >> "$logs/build.log" 2>&1 \
  || { grep -E "error|warning" "$logs/build.log" | head -40; exit 1; }
echo "built in $((SECONDS - start)) s"
rc=0
timeout 180 build-gpu/tests/xport_tests_dev -tc='*CUDA*,engine*,cuda graphs*' --test-suite-exclude='oracle*' \
  > "$logs/tests.log" 2>&1 || rc=1
tail -4 "$logs/tests.log"
echo "tested at $((SECONDS - start)) s"
timeout 200 build-gpu/bench/bench_cuda --benchmark_min_time=0.2 --benchmark_out="$logs/bench.json" \
  --benchmark_out_format=json > "$logs/bench.txt" 2>&1 || rc=1
cat "$logs/bench.txt" | grep -E "^BM_|error" | head -40
echo "done in $((SECONDS - start)) s"
exit $rc
