#!/usr/bin/env bash
# tools/check-compilers.sh: the project's sources through the compilers users have but this
# Debian 12 machine does not: GCC 13 (the lent GPU machine's, Ubuntu 24.04), GCC 14 and clang 19
# (Debian 13's). As root, it makes a Debian 13 chroot once (debootstrap from Debian's archive,
# ~600 MB, in $XPORT_CHROOT or /opt/trixie), binds the sources, the torch wheel's headers and the
# header-only dependencies into it, and syntax-checks every translation unit (tests, benchmarks,
# examples) with the project's warnings, printing each warning (-Wdangling-reference, ...).
#   tools/check-compilers.sh                 # g++-13, g++-14, clang++
#   tools/check-compilers.sh g++-13          # one compiler
#   XPORT_CHECK_FILES="tests/test_engine.cpp" tools/check-compilers.sh g++-13   # some files
# It runs the front end only (-fsyntax-only): warnings that need the optimizer (-Wmaybe-uninitialized)
# show in a full build, which tools/gpu-check.sh does with GCC 13 on the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
root=${XPORT_CHROOT:-/opt/trixie}
if [[ $# -gt 0 ]]; then compilers=("$@"); else compilers=(g++-13 g++-14 clang++); fi
if [[ ! -x "$root/usr/bin/g++-14" ]]; then
  command -v debootstrap > /dev/null || apt-get install -y debootstrap
  debootstrap --variant=minbase --include=g++-14,g++-13,clang trixie "$root"  # (debootstrap's default mirror)
fi
for c in g++-13 clang; do chroot "$root" bash -c "command -v ${c/clang/clang++} > /dev/null || apt-get install -y $c > /dev/null"; done
torch_include=$(python3 -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "include"))')
bind() {  # bind $1 at $root$2
  mkdir -p "$root$2"
  mountpoint -q "$root$2" || mount --bind "$1" "$root$2"
}
bind "$PWD" /src
bind "$torch_include" /torchinc
for d in nlohmann doctest benchmark; do bind "/usr/include/$d" "/hostinc/$d"; done
printf '%s\n' '-DXPORT_TEST_DIR_FROM_BINARY=\"x\"' > "$root/tmp/xport-flags"
status=0
for cxx in "${compilers[@]}"; do
  echo "== $cxx"
  for f in ${XPORT_CHECK_FILES:-tests/*.cpp bench/*.cpp examples/*.cpp}; do
    out=$(chroot "$root" bash -c "cd /src && $cxx -std=c++20 -fsyntax-only -Wall -Wextra -Wno-unused-parameter \
          -Iinclude -Itests -Ibench -isystem /torchinc -isystem /torchinc/torch/csrc/api/include -isystem /hostinc \
          @/tmp/xport-flags $f" 2>&1 | grep -E "warning:|error:" || true)
    if [[ -n "$out" ]]; then
      echo "$out" | sed "s|^|$f: |"
      status=1
    fi
  done
done
exit $status
