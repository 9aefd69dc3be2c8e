#!/bin/bash
# Issue 4 on the GPU machine (the device tool's `run`): build, the IQL GEMM tests, and the
# ablation at B = 16384 — single-stream + sequential IQL (the seed's "before"), multi-stream +
# sequential, + grouped, + batched — then the other CUDA tests as time allows.
# Usage there:  bash bench/run_iql_ablation.sh      (logs and results under $OUT)
set -o pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
d=$(mktemp -d); for f in .devdeps/*.deb; do dpkg -x "$f" "$d"; done
export CMAKE_PREFIX_PATH=$d/usr LD_LIBRARY_PATH=$d/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH CPATH=$d/usr/include
export OPENBLAS_NUM_THREADS=16
log=$OUT/log.txt
t0=$(date +%s)
cmake -S . -B build-dev -DFOXHUNT_CUDA=ON -Dcmocka_DIR=$d/usr/lib/x86_64-linux-gnu/cmake/cmocka > /dev/null
cmake --build build-dev -j16 2>&1 | grep -E "error|warning" | tee $log
echo "build: $(( $(date +%s) - t0 )) s" | tee -a $log
cd build-dev || exit 1
timeout 120 ctest -V -R test_cuda_iql_gemm 2>&1 | tee $OUT/ctest_iql.txt |
  grep -E "IQL-GEMM|ACCURACY|Passed|Failed|FAILED|rror" | tee -a $log
timeout 150 examples/foxhunt-bench --batch 16384 --steps 50 --modes single-tf32,multi-tf32 \
  --iql-gemm sequential,grouped,batched --machine h200 --out $OUT/bench_iql.json 2>&1 | tee -a $log
timeout ${REST_S:-200} ctest -V -R "test_cuda_(vs_cpu|determinism|nosync|api|checkpoint)" 2>&1 |
  tee $OUT/ctest_cuda.txt | grep -E "ACCURACY|DETERMINISM|NOSYNC|Passed|Failed|FAILED|tests passed" |
  tee -a $log
echo "total: $(( $(date +%s) - t0 )) s" | tee -a $log
