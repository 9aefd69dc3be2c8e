#!/bin/bash
# A short GPU run through the device tool's `run`: build with CUDA, run the listed steps, logs and
# results under $OUT. bench/run_device.sh is the full run (every test, every benchmark).
# Usage there:  bash bench/run_device_quick.sh STEP...
#   ctest-cuda   every test_cuda_* binary (verbose: [ACCURACY] lines), one at a time
#   attn-test    test_cuda_attention only
#   vs-cpu       test_cuda_vs_cpu only
#   attn-bench   foxhunt-bench-attention at B = 1024, 4096, 16384, 65536
#   step-bench   foxhunt-bench at B = 16384, the attention kernel paths side by side
#   digest       tests/python/state_digest.py in the four modes (bitwise checks of refactors)
#   iqn-bench    foxhunt-bench at B = 16384, the unfused and fused IQN target pass side by side
#   ncu-attn     Nsight Compute on the tensor-core attention kernels at B = 16384
set -o pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
d=$(mktemp -d); for f in .devdeps/*.deb; do dpkg -x "$f" "$d"; done
export CMAKE_PREFIX_PATH=$d/usr LD_LIBRARY_PATH=$d/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH CPATH=$d/usr/include
log=$OUT/log.txt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used --format=csv,noheader | tee $log
t0=$(date +%s)
cmake -S . -B build-dev -DFOXHUNT_CUDA=ON -DCMAKE_PREFIX_PATH=$d/usr \
  -Dcmocka_DIR=$d/usr/lib/x86_64-linux-gnu/cmake/cmocka > $OUT/build.txt 2>&1
cmake --build build-dev -j16 >> $OUT/build.txt 2>&1 || { grep -E "error" $OUT/build.txt | head -30; echo BUILD FAILED; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s" | tee -a $log
for s in "$@"; do
  t1=$(date +%s)
  case $s in
  ctest-cuda)
    ( cd build-dev && ctest -V -R "^test_cuda" --timeout 400 ) > $OUT/ctest_cuda.txt 2>&1
    echo "ctest-cuda rc=$?" | tee -a $log
    grep -E "\[(ACCURACY|ATTN|NOSYNC|DETERMINISM|ACT|TIMINGS|MEMORY|GRAPH)\]|tests passed|tests failed|Failed|FAILED|rror" $OUT/ctest_cuda.txt | tee -a $log ;;
  attn-test)
    timeout 400 build-dev/tests/test_cuda_attention > $OUT/attn_test.txt 2>&1
    echo "attn-test rc=$?" | tee -a $log
    grep -E "\[(ATTN|ACCURACY)\]|FAILED|rror|PASSED" $OUT/attn_test.txt | tee -a $log ;;
  vs-cpu)
    timeout 400 build-dev/tests/test_cuda_vs_cpu > $OUT/vs_cpu.txt 2>&1
    echo "vs-cpu rc=$?" | tee -a $log
    grep -E "\[ACCURACY\]|FAILED|rror|PASSED" $OUT/vs_cpu.txt | tee -a $log ;;
  attn-bench)
    build-dev/examples/foxhunt-bench-attention --iters 30 --machine h200 \
      --out $OUT/attn_bench.json 2>&1 | tail -22 | tee -a $log ;;
  step-bench)
    build-dev/examples/foxhunt-bench --batch 16384 --steps 30 --modes multi-tf32,single-tf32 \
      --variant FOXHUNT_ATTN_KERNELS=tc,tc-split --machine h200 \
      --out $OUT/step_bench.json 2>&1 | tail -9 | tee -a $log ;;
  ncu-attn)
    timeout 300 ncu --clock-control none --kernel-name regex:k_attn_tc --launch-count 2 \
      --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
      --section InstructionStats --section LaunchStats --section MemoryWorkloadAnalysis_Tables \
      build-dev/examples/foxhunt-bench-attention --batch 16384 --iters 1 --out /tmp/n.json \
      > $OUT/ncu_attn.txt 2>&1
    echo "ncu rc=$?" | tee -a $log
    grep -E "k_attn_tc|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit|Issued Ipc|Executed Instructions |Stall|Warp Cycles Per Issued|Bank|Shared Memory Configuration|Dynamic Shared" $OUT/ncu_attn.txt | head -80 | tee -a $log ;;
  iqn-bench)
    build-dev/examples/foxhunt-bench --batch 16384 --steps 30 --modes multi-tf32,single-tf32 \
      --variant FOXHUNT_IQN_KERNELS=unfused,fused --machine h200 \
      --out $OUT/iqn_bench.json 2>&1 | tail -7 | tee -a $log ;;
  digest)
    python3 tests/python/state_digest.py build-dev/libfoxhunt.so 2>&1 | tail -4 | tee -a $log ;;
  *) echo "unknown step $s" | tee -a $log ;;
  esac
  echo "$s: $(( $(date +%s) - t1 )) s" | tee -a $log
done
