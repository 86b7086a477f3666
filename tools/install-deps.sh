#!/usr/bin/env bash
# Installs what xport needs to build, test and benchmark: Debian's packages (Debian 12 or 13),
# PyTorch 2.13.0 (CPU) with pip, whose wheel is both the primary LibTorch (C++) and the Python
# oracle (torch.export) of the interop tests, and Hugging Face transformers (the real models).
# Run as root. Idempotent: what is already installed is left as it is.
set -euo pipefail
packages=(
  cmake ninja-build g++ ccache
  libtorch-dev          # the second LibTorch build (1.13 on Debian 12, 2.6 on Debian 13)
  doctest-dev           # tests
  libbenchmark-dev      # bench/
  nlohmann-json3-dev    # .pt2 archives (JSON)
)
# --fuzz: also a clang with libFuzzer that compiles LibTorch 2.13's headers and xport in C++20
# (clang 16 on Debian 12: clang 14 lacks std::source_location's builtin; the newest packaged one
# otherwise) for `XPORT_FUZZ_CXX=clang++-NN tools/fuzz.sh`
if [[ "${1:-}" == "--fuzz" ]]; then
  for v in 16 17 18 19 20; do
    if apt-cache show "clang-$v" >/dev/null 2>&1; then packages+=("clang-$v" "libclang-rt-$v-dev"); break; fi
  done
fi
command -v python3 >/dev/null || packages+=(python3 python3-pip)
python3 -c "import ensurepip" 2>/dev/null || packages+=(python3-venv)  # Debian's python3 makes venvs with it
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# torch 2.13.0, pinned: pip takes the CPU wheel that lies on the machine's disk (a looser range
# would pull a CUDA build of several GB). A Debian-managed python3 needs --break-system-packages.
torch_version=2.13.0
if ! python3 -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$torch_version')" 2>/dev/null; then
  pip=(python3 -m pip install --quiet --disable-pip-version-check "torch==$torch_version")
  "${pip[@]}" 2>/dev/null || "${pip[@]}" --break-system-packages
fi
# The Python ecosystems the real-model corpora build their architectures from (library code,
# random weights, no hub), pinned; pure Python, they leave torch as it is. `pin PYTHON PKG VERSION`
# installs PKG==VERSION unless that version is there.
transformers_version=5.25.0 diffusers_version=0.42.1 torchao_version=0.18.0 timm_version=1.0.31
pin() {
  local python=$1 pkg=$2 version=$3
  "$python" -c "import importlib.metadata as m, sys; sys.exit(m.version('$pkg') != '$version')" 2>/dev/null && return
  local pip=("$python" -m pip install --quiet --disable-pip-version-check "$pkg==$version")
  [[ "$python" == python3 ]] && pip+=("torch==$torch_version")
  "${pip[@]}" 2>/dev/null || "${pip[@]}" --break-system-packages
}
pin python3 transformers "$transformers_version"
pin python3 diffusers "$diffusers_version"
pin python3 torchao "$torchao_version"
pin python3 numpy 2.4.6  # the C API's test passes NumPy arrays through DLPack (tests/python/c_api.py)
# torch 2.14.1 + torchvision 0.29.1 in a venv of their own (PyPI's torchvision does not import
# beside torch 2.13): the second Python oracle, which writes and reads the torchvision corpus
# and the diffusers and timm ones (timm needs torchvision).
# About 5.5 GB (a CUDA build that runs on the CPU), taken from this machine's disk by pip.
venv=${XPORT_TORCHVISION_VENV:-/opt/xport/torch-2.14.1}
if [[ "$(uname -m)" == x86_64 ]]; then
  if ! "$venv/bin/python" -c "import torch, torchvision, sys; sys.exit(not (torch.__version__.startswith('2.14.1') and torchvision.__version__.startswith('0.29.1')))" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check torch==2.14.1 torchvision==0.29.1
  fi
  for p in "transformers $transformers_version" "diffusers $diffusers_version" "torchao $torchao_version" "timm $timm_version"; do
    pin "$venv/bin/python" $p
  done
fi
