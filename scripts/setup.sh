#!/usr/bin/env bash
# Installs what building and testing foxhunt needs on a fresh Debian machine (as root), then
# configures and builds into build/. Idempotent: a second run only rebuilds what changed.
#
#   bash scripts/setup.sh [--quiet]
#
# --quiet sends the output to build/setup.log and prints one line (the log's tail on failure).
# FOXHUNT_CUDA=AUTO|ON|OFF chooses the CUDA backend (CMake's -DFOXHUNT_CUDA; the choice is
# remembered in build/): AUTO, the first build's default, builds it when nvcc is found, GPU or
# not, because a library built here may run on a GPU machine; OFF builds the CPU backend only,
# which is much faster to compile. FOXHUNT_CMAKE_ARGS adds CMake arguments.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--quiet" ]; then
  mkdir -p build
  t0=$SECONDS
  if ! bash "$0" >build/setup.log 2>&1; then
    tail -n 25 build/setup.log
    echo "set-up failed; the whole log is build/setup.log" >&2
    exit 1
  fi
  echo "set-up: $(tail -n 1 build/setup.log) in $((SECONDS - t0)) s (log: build/setup.log)"
  exit 0
fi
pkgs=(cmake g++ pkgconf libopenblas-dev libcmocka-dev librandom123-dev doxygen
      python3-numpy python3-pytest python3-torch python3-matplotlib cargo
      librust-libloading-dev)
bash scripts/apt-install.sh "${pkgs[@]}"
[ -x /usr/local/cuda/bin/nvcc ] && export PATH=/usr/local/cuda/bin:$PATH
mkdir -p build
args=(-DCMAKE_BUILD_TYPE=Release)
[ -n "${FOXHUNT_CUDA:-}" ] && args+=(-DFOXHUNT_CUDA="$FOXHUNT_CUDA")
# shellcheck disable=SC2086  # FOXHUNT_CMAKE_ARGS is a list of words
cmake -S . -B build "${args[@]}" ${FOXHUNT_CMAKE_ARGS:-} | tee build/cmake.log | grep "foxhunt:"
cmake --build build -j"$(nproc)"
echo "built build/libfoxhunt.so, $(grep -o 'CUDA backend .*' build/cmake.log)"
