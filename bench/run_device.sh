#!/bin/bash
# One full run on the GPU machine (the device tool's `run`): build, tests, benchmark, graph dumps.
# Usage there:  bash bench/run_device.sh [early|quick|peer|ncu]   (logs and results under $OUT)
#   early: CUDA tests and a short benchmark only; quick: B = 16384 only; peer: quick plus the
#   PyTorch peer; none: every batch size, the IQL GEMM comparison and the peer.
. bench/device_env.sh
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv
  nproc
  t0=$(date +%s)
  cmake -S . -B build-dev -DFOXHUNT_CUDA=ON -DCMAKE_PREFIX_PATH=$d/usr \
    -Dcmocka_DIR=$d/usr/lib/x86_64-linux-gnu/cmake/cmocka 2>&1 | tail -3
  cmake --build build-dev -j16 2>&1 | grep -E "error|warning|Built target foxhunt$" 
  echo "build: $(( $(date +%s) - t0 )) s"
} 2>&1 | tee $log
[ -x build-dev/examples/foxhunt-bench ] || { echo BUILD FAILED | tee -a $log; exit 1; }

# Which IQL GEMM modes run at the default size (each in its own process: a fault is sticky).
for m in auto grouped batched sequential; do
  build-dev/examples/foxhunt-bench --batch 16384 --steps 3 --warmup 1 --modes multi-tf32 \
    --iql-gemm $m --out /tmp/d_$m.json > /tmp/d_$m.log 2>&1
  echo "iql-gemm $m at B=16384: rc=$? $(grep -E 'failed|ms/step' /tmp/d_$m.log | head -2 | tr '\n' ' ')" | tee -a $log
done

# Graph dumps (docs/graph*.dot): the default config, multi- and single-stream.
FOXHUNT_DUMP_GRAPH=$OUT/graph_multi.dot build-dev/examples/foxhunt-bench --batch 16384 --steps 3 \
  --warmup 1 --modes multi-tf32 --out /tmp/g1.json >> $log 2>&1
FOXHUNT_DUMP_GRAPH=$OUT/graph_single.dot build-dev/examples/foxhunt-bench --batch 16384 --steps 3 \
  --warmup 1 --modes single-tf32 --out /tmp/g2.json >> $log 2>&1

# CPU-only tests in the background, the CUDA tests in the foreground (verbose: [ACCURACY] lines).
bg=
if [ "$1" != early ]; then
  ( cd build-dev && ctest -j6 -E "^test_cuda" --output-on-failure > $OUT/ctest_other.txt 2>&1 ) &
  bg=$!
fi
t1=$(date +%s)
( cd build-dev && ctest -V -R "^test_cuda" --timeout 300 ) > $OUT/ctest_cuda.txt 2>&1
echo "cuda tests: $(( $(date +%s) - t1 )) s" | tee -a $log
[ -n "$bg" ] && wait $bg
grep -E "\[(ACCURACY|NOSYNC|DETERMINISM|ACT|TIMINGS|MEMORY|GRAPH|GUARD)\]|tests passed|tests failed|Passed|Failed|FAILED|SKIPPED|PASSED|rror" $OUT/ctest_cuda.txt | tee -a $log
[ -n "$bg" ] && tail -25 $OUT/ctest_other.txt | tee -a $log

# compute-sanitizer's memcheck, racecheck and synccheck over every CUDA path at B <= 256
# (tests/test_cuda_sanitize.cpp), and over the fused SiLU layers' own test (test_cuda_linear:
# those small configs are below the layers' 128-tile gate) and the branch backward's
# (test_cuda_branch_grads, at B = 16384 too): the quick script's steps (its build of build-dev
# is a no-op here); counts in the log, reports in $OUT/sanitize/.
OUT=$OUT/sanitize bash bench/run_device_quick.sh sanitize linear-san > /dev/null 2>&1
grep "SANITIZER" $OUT/sanitize/log.txt | tee -a $log

# The Python binding's tests and the PyTorch oracle against the CUDA backend (strict FP32).
if [ "$1" != early ]; then
  t2=$(date +%s)
  FOXHUNT_LIBRARY=$PWD/build-dev/libfoxhunt.so FOXHUNT_TEST_BACKEND=cuda PYTHONUNBUFFERED=1 \
    FOXHUNT_ORACLE_REPORT=$OUT/oracle_errors_cuda.txt \
    timeout 300 python3 -m pytest -q -p no:cacheprovider bindings/python/tests tests/python \
    > $OUT/pytest_cuda.txt 2>&1
  echo "pytest (oracle, cuda backend): rc=$? in $(( $(date +%s) - t2 )) s" | tee -a $log
  tail -3 $OUT/pytest_cuda.txt | tee -a $log
  tail -40 $OUT/oracle_errors_cuda.txt | tee -a $log
fi

# The benchmark, with the GPU to itself.
if [ "$1" = early ]; then
  build-dev/examples/foxhunt-bench --batch 16384 --steps 20 --modes multi-tf32,single-tf32,multi-strict --machine $machine --out $OUT/bench.json 2>&1 | tee -a $log
elif [ "$1" = quick ] || [ "$1" = peer ]; then
  build-dev/examples/foxhunt-bench --batch 16384 --steps 30 --machine $machine --out $OUT/bench.json 2>&1 | tee -a $log
else
  build-dev/examples/foxhunt-bench --steps 50 --machine $machine --out $OUT/bench.json 2>&1 | tee -a $log
  build-dev/examples/foxhunt-bench --batch 16384 --steps 50 --modes multi-tf32,single-tf32 \
    --iql-gemm batched,sequential --machine $machine --out $OUT/bench_iql.json 2>&1 | tail -6 | tee -a $log
fi

# Per-kernel durations of one step (Nsight Compute, clocks left alone), if ncu is there.
if [ "$1" = ncu ] && command -v ncu > /dev/null; then
  timeout 100 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
    build-dev/examples/foxhunt-bench --batch 16384 --steps 1 --warmup 0 --modes multi-tf32 \
    --iql-gemm batched --out /tmp/n.json > $OUT/ncu.csv 2>&1
  echo "ncu rc=$? lines=$(wc -l < $OUT/ncu.csv)" | tee -a $log
fi

# The PyTorch peer side by side with foxhunt (same process tree, same GPU, one after the other).
if [ "$1" = peer ] || [ -z "$1" ]; then
  PYTHONUNBUFFERED=1 timeout 400 build-dev/examples/foxhunt-bench --batch 1024,16384 --steps 50 \
    --modes multi-tf32,single-tf32 --peer --machine $machine --out $OUT/bench_peer.json 2>&1 | tee -a $log
fi
