#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz, clang, ASan + UBSan, CPU backend) into build-fuzz/
# and runs each for SECONDS (default 60) from the checked-in seed corpus. New inputs go to
# build-fuzz/corpus/<harness>, crashes to build-fuzz/crashes/. Exits non-zero on any finding.
#   bash scripts/fuzz.sh            # CI: 60 s each
#   bash scripts/fuzz.sh 3600       # a long campaign: an hour each
#   FUZZ_ONLY=load bash scripts/fuzz.sh 600
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
bash scripts/apt-install.sh clang libclang-rt-dev cmake pkgconf libopenblas-dev libcmocka-dev \
  librandom123-dev
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFOXHUNT_CUDA=OFF \
  -DFOXHUNT_FUZZ=ON -DFOXHUNT_TESTS=OFF -DFOXHUNT_EXAMPLES=OFF >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target fuzz_load fuzz_upload_step fuzz_write_tensor \
  fuzz_create fuzz_insert > build-fuzz/build.log 2>&1 || { tail -30 build-fuzz/build.log; exit 1; }
# The harnesses save a checkpoint per input (the digest): on tmpfs the save's fsync costs nothing.
scratch=/tmp; [ -d /dev/shm ] && [ -w /dev/shm ] && scratch=/dev/shm
export OPENBLAS_NUM_THREADS=1 TMPDIR=${FUZZ_TMPDIR:-$scratch}
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
mkdir -p build-fuzz/crashes
status=0
for h in ${FUZZ_ONLY:-load upload_step write_tensor create insert}; do
  mkdir -p "build-fuzz/corpus/$h"
  log="build-fuzz/fuzz_$h.log"
  if "build-fuzz/tests/fuzz/fuzz_$h" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 \
       -artifact_prefix="build-fuzz/crashes/$h-" -print_final_stats=1 \
       "build-fuzz/corpus/$h" "tests/fuzz/corpus/$h" > "$log" 2>&1; then
    echo "fuzz_$h: $(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}') inputs in ${seconds} s, no finding"
  else
    status=1
    echo "fuzz_$h: FAILED (log: $log)"
    grep -E "FUZZ ASSERTION|ERROR: |SUMMARY|runtime error" "$log" | head -20 || tail -30 "$log"
  fi
done
exit $status
