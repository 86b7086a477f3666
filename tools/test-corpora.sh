#!/usr/bin/env bash
# The wider real-model corpora, off CI's line (an hour and more on two cores the first time;
# the exports are cached in ~/.cache/xport/corpus, so a second run only re-checks xport):
# diffusers by torch 2.13 and 2.14.1, timm by 2.14.1, each loaded, verified, run (interpreter and
# engine), lowered, optimized and saved by xport, and read back by torch. Run after
# tools/install-deps.sh; XPORT_CORPUS_FULL=1 exports every model each script lists, not one
# of a kind. Tables land in build/tests/corpus/*_table.md.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${XPORT_JOBS:-2}
cmake -S . -B build -G Ninja -DXPORT_TORCH=wheel -DXPORT_EXTRA_CORPORA=ON
cmake --build build -j"$jobs" --target xport_tests
status=0
ctest --test-dir build -L corpora -j"$jobs" --output-on-failure --timeout 7200 || status=$?
# back to CI's configuration, so a later tools/test-all.sh runs what CI runs
cmake -S . -B build -DXPORT_EXTRA_CORPORA=OFF >/dev/null
exit $status
