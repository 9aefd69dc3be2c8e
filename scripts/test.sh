#!/usr/bin/env bash
# Builds and runs every test: the cmocka suite (CTest; GPU tests skip without a device), the
# API reference with warnings as errors, the Python binding, oracle and example tests (pytest;
# the README's snippets, the trainer's files, the HER example) and the Rust crate's tests and
# examples (cargo). The build's output goes to build/setup.log.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --quiet
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
(cd build && ctest --output-on-failure -j"$(nproc)")
cmake --build build --target docs >/dev/null
echo "docs: Doxygen reference built without warnings"
export FOXHUNT_LIBRARY="$PWD/build/libfoxhunt.so"
/usr/bin/python3 -m pytest -q bindings/python/tests tests/python tests/examples
(cd bindings/rust && cargo test --offline -q)
