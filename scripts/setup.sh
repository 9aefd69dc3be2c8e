#!/usr/bin/env bash
# Installs what building and testing foxhunt needs on a fresh Debian machine (as root), then
# configures and builds into build/. Idempotent: a second run only rebuilds what changed.
# The CUDA backend is built when nvcc is found (FOXHUNT_CUDA=AUTO); the CPU build needs none.
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(cmake g++ pkgconf libopenblas-dev libcmocka-dev librandom123-dev doxygen
      python3-numpy python3-pytest python3-torch cargo librust-libloading-dev)
bash scripts/apt-install.sh "${pkgs[@]}"
[ -x /usr/local/cuda/bin/nvcc ] && export PATH=/usr/local/cuda/bin:$PATH
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release ${FOXHUNT_CMAKE_ARGS:-} >/dev/null
cmake --build build -j"$(nproc)"
