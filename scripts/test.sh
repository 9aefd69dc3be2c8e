#!/usr/bin/env bash
# Builds and runs every test: the cmocka suite (CTest; GPU tests skip without a device), the
# API reference with warnings as errors, the Python binding and oracle tests (pytest) and the
# Rust crate's tests (cargo).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
(cd build && ctest --output-on-failure -j"$(nproc)")
cmake --build build --target docs >/dev/null
echo "docs: Doxygen reference built without warnings"
export FOXHUNT_LIBRARY="$PWD/build/libfoxhunt.so"
if [ -d bindings/python/tests ] || [ -d tests/python ]; then
  /usr/bin/python3 -m pytest -q bindings/python/tests tests/python
fi
if [ -f bindings/rust/Cargo.toml ]; then
  (cd bindings/rust && cargo test --offline -q)
fi
