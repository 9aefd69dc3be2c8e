#!/bin/bash
# A short GPU run through the device tool's `run`: build with CUDA, run the listed steps, logs and
# results under $OUT. bench/run_device.sh is the full run (every test, every benchmark).
# Usage there:  bash bench/run_device_quick.sh STEP...
#   ctest-cuda   every test_cuda_* binary (verbose: [ACCURACY] lines), one at a time
#   ctest-par    every test_cuda_* binary under ctest -j$(nproc), as the README's test command runs them
#   attn-test    test_cuda_attention only
#   head-fac     test_cuda_attention_head_factored (the factored head's three kernels against
#                float64), plain and under compute-sanitizer's racecheck and memcheck (its kernels)
#   vs-cpu       test_cuda_vs_cpu only
#   reduce-test  test_cuda_reduce and test_cuda_branch_grads, plain and under memcheck and racecheck,
#                on the kept path and, when set, with $REDUCE_ENV ("VAR=x", a trial switch)
#   linear-test  test_cuda_linear only (the fused SiLU layer against float64, both paths)
#   linear-san   compute-sanitizer memcheck, synccheck, racecheck on test_cuda_linear (the fused
#                SiLU layers' every epilogue; test_cuda_sanitize's small configs are below their
#                128-tile gate) and on test_cuda_branch_grads (the branch backward's kernel at
#                B = 16384 and at its edge cases); $LINEAR_SAN_TESTS: other test
#                binaries
#   iqn-test     test_cuda_iqn only (the fused IQN kernels against float64, the paths against each other)
#   iql-test     test_cuda_iql (the fused IQL kernel against float64, the paths against each other
#                and the CPU), test_cuda_iql_gemm and test_cuda_memory_plan
#   iql-san      compute-sanitizer memcheck, synccheck, racecheck on test_cuda_iql's kernel test
#   iqn-san      the same on test_cuda_iqn's three kernel tests (target, online, backward)
#   attn-bench   foxhunt-bench-attention at B = 1024, 4096, 16384, 65536
#   step-bench   foxhunt-bench at B = 16384, the attention kernel paths side by side
#   rev-bench    an earlier tree ($REV_TAR, `git archive` of it) built beside this one, both
#                timed at B = 16384 in the order old, new, new, old (a change that has no switch)
#   ab-build     trials that are compile definitions ($AB_DEFS, "NAME=v ..."; $AB_TESTS), built
#                and timed on the device by bench/ab_carry.sh (its build, then its run); $AB_PROBE:
#                a .cu file whose SASS cuobjdump prints for sm_90a
#   digest       tests/python/state_digest.py in the six modes (bitwise checks of refactors)
#   digest-env   the same with the environment $DIGEST_ENV against without: equal or not
#                ($DIGEST_ARGS: state_digest.py's options, e.g. "--batch 16384" where a trial's
#                path runs only at large batches)
#   vbench       foxhunt-bench at B = 16384 (TF32, multi/single; $VBENCH_MODES), one --variant
#                run per entry of $VARIANTS ("VAR=a,b VAR2=c,d"), with $VBENCH_ARGS' options
#   env-tests    test binaries under a trial's environment: $TEST_SETS ("VAR=x|test_a test_b;...")
#   iqn-bench    foxhunt-bench at B = 16384, the four FOXHUNT_IQN_KERNELS levels side by side
#   ncu-attn     Nsight Compute on the tensor-core attention kernels at B = 16384
#   ncu-iqn      Nsight Compute on the fused IQN kernels at B = 16384 (one step; $NCU_RE: other
#                kernels, e.g. k_iql_fused)
#   ncu-src      Nsight Compute's per-instruction stall samples (SourceCounters) of the fused IQN
#                and tensor-core attention kernels at B = 16384, the SASS pages as CSV ($NCU_RE;
#                $NCU_ENV: a trial switch, $NCU_TAG: the files' suffix)
#   ncu-step     Nsight Compute: every kernel of one default step (B = 16384, TF32), durations
#   ncu-warm     the same single-stream with warm caches ($NCU_ENV: a trial switch; $NCU_TAG: file suffix)
#   ncu-roof     ncu-warm's run with DRAM bytes, DRAM, SM and tensor-pipe throughput per kernel
#                (bench/ncu_roof_summary.py: which kernels the memory bounds, which the SMs)
#   nccl         test_cuda_nccl: W = 1 with a communicator bitwise equal to none (one GPU)
#   nccl2        test_cuda_nccl_2gpu: W = 2 against one pipeline at 2B (skips below 2 GPUs)
#   dp-bench     foxhunt-bench-dp at B = 16384: rows/s at W = 1 and every GPU, all-reduce share
#   dp-train     foxhunt-dp on every GPU, one process each, 600 steps (the README's launch)
#   pytest-cuda  the Python binding's tests and the PyTorch oracle on the CUDA backend
#   sanitize     compute-sanitizer memcheck, racecheck, synccheck on test_cuda_sanitize (B <= 256)
#   bench        foxhunt-bench at B = 16384, four modes, the replay runs and the PyTorch peers
#   wgrad-layout bench/probe_wgrad_layout.py: the weight-gradient products through PyTorch's cuBLAS,
#                operands stored as the step stores them against transposed (K-major)
#   bench-sizes  foxhunt-bench at B = 1024, 4096, 65536 (TF32, multi- and single-stream)
#   timeline     foxhunt-timeline at B = 16384 ($TIMELINE_MODES, default multi-tf32 single-tf32;
#                $TIMELINE_BATCH, batch sizes, default 16384): one step's kernels on the GPU's
#                clock (CUPTI), how many run at once, the gaps ($TIMELINE_ENV: a trial switch,
#                "VAR=x", run with and without it; the files with it end in _env)
#   trainer      foxhunt-trainer on the GPU: 1 seed, 1000 steps (the replay, acting behind)
#   trainer-math foxhunt-trainer on the GPU in TF32 and in BF16 (--math): 1 seed, 1000 steps
#                each, no early stop; the learning curves side by side
#   bf16-test    test_cuda_bf16 (BF16 GEMMs, BF16 learns as TF32 does), test_cuda_determinism,
#                test_cuda_memory_plan
#   mode-bench   foxhunt-bench at B = 16384: TF32 and BF16, multi- and single-stream
#   examples     tests/examples (trainer, HER example, README snippets) on the CUDA backend
# NCCL: CMake takes it from PyTorch's wheel (python3's nvidia.nccl) when /usr/local/cuda has
# none; FOXHUNT_CMAKE_ARGS="-DNCCL_LIBRARY=... -DNCCL_INCLUDE_DIR=..." overrides.
. bench/device_env.sh
# Appends: a second call with the same $OUT keeps the first call's log.
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used --format=csv,noheader | tee -a $log
# configure SRC BUILD: CMake with CUDA, the unpacked test dependencies and $FOXHUNT_CMAKE_ARGS.
configure() {
  # shellcheck disable=SC2086  # FOXHUNT_CMAKE_ARGS is a list of words
  cmake -S "$1" -B "$2" -DFOXHUNT_CUDA=ON -DCMAKE_PREFIX_PATH=$d/usr \
    -Dcmocka_DIR=$d/usr/lib/x86_64-linux-gnu/cmake/cmocka ${FOXHUNT_CMAKE_ARGS:-}
}
t0=$(date +%s)
configure . build-dev > $OUT/build.txt 2>&1
grep "foxhunt:" $OUT/build.txt | tee -a $log
cmake --build build-dev -j16 >> $OUT/build.txt 2>&1 || { grep -E "error" $OUT/build.txt | head -30; echo BUILD FAILED; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s" | tee -a $log
for s in "$@"; do
  t1=$(date +%s)
  case $s in
  ctest-cuda)
    ( cd build-dev && ctest -V -R "^test_cuda" --timeout 400 ) > $OUT/ctest_cuda.txt 2>&1
    echo "ctest-cuda rc=$?" | tee -a $log
    grep -E "\[(ACCURACY|ATTN|NOSYNC|DETERMINISM|ACT|TIMINGS|MEMORY|GRAPH)\]|tests passed|tests failed|Failed|FAILED|rror" $OUT/ctest_cuda.txt | tee -a $log ;;
  ctest-par)
    ( cd build-dev && ctest -j$(nproc) -R "^test_cuda" --timeout 400 --output-on-failure ) > $OUT/ctest_par.txt 2>&1
    echo "ctest-par rc=$?" | tee -a $log
    grep -E "tests passed|tests failed|Failed|\(Failed\)" $OUT/ctest_par.txt | tee -a $log ;;
  attn-test)
    timeout 400 build-dev/tests/test_cuda_attention > $OUT/attn_test.txt 2>&1
    echo "attn-test rc=$?" | tee -a $log
    grep -E "\[(ATTN|ACCURACY)\]|FAILED|rror|PASSED" $OUT/attn_test.txt | tee -a $log ;;
  iqn-test)
    timeout 300 build-dev/tests/test_cuda_iqn > $OUT/iqn_test.txt 2>&1
    echo "iqn-test rc=$?" | tee -a $log
    grep -E "\[IQN\]|FAILED|rror|PASSED" $OUT/iqn_test.txt | tee -a $log ;;
  iql-test)
    for t in test_cuda_iql test_cuda_iql_gemm test_cuda_memory_plan; do
      timeout 300 build-dev/tests/$t > $OUT/$t.txt 2>&1
      echo "$t rc=$?" | tee -a $log
      grep -E "\[(IQL|IQL-GEMM|MEMORY)\]|FAILED|rror|PASSED" $OUT/$t.txt | tee -a $log
    done ;;
  iql-san|iqn-san)
    # The kernel tests alone (their names hold "_kernel_vs_float64"): small batches.
    cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
    t=test_cuda_${s%-san}
    for tool in memcheck synccheck racecheck; do
      FOXHUNT_TEST_FILTER="*_kernel_vs_float64" timeout ${SAN_TIMEOUT:-120} "$cs" --tool $tool \
        --error-exitcode 99 --print-limit 50 build-dev/tests/$t > $OUT/${s}_$tool.txt 2>&1
      echo "[SANITIZER] $t kernel tests, $tool: rc=$? $(grep -Eo "(ERROR|RACECHECK) SUMMARY: .*" $OUT/${s}_$tool.txt | tail -1)" | tee -a $log
    done ;;
  linear-san)
    cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
    for t in ${LINEAR_SAN_TESTS:-test_cuda_linear test_cuda_branch_grads}; do
      for tool in memcheck synccheck racecheck; do
        timeout ${SAN_TIMEOUT:-200} "$cs" --tool $tool --error-exitcode 99 --print-limit 50 \
          build-dev/tests/$t > $OUT/${t}_san_$tool.txt 2>&1
        echo "[SANITIZER] $t, $tool: rc=$? $(grep -Eo "(ERROR|RACECHECK) SUMMARY: .*" $OUT/${t}_san_$tool.txt | tail -1)" | tee -a $log
      done
    done ;;
  reduce-test)
    # test_cuda_reduce and test_cuda_branch_grads on the kept path and, when set, with $REDUCE_ENV
    # (a trial switch), each also under compute-sanitizer memcheck and racecheck.
    cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
    for e in "" ${REDUCE_ENV:-}; do
      for t in test_cuda_reduce test_cuda_branch_grads; do
        tag=${t}${e:+_${e##*=}}
        timeout 300 env $e build-dev/tests/$t > $OUT/$tag.txt 2>&1
        echo "$t ${e:-(kept path)} rc=$?" | tee -a $log
        grep -E "\[(REDUCE|BRANCH-GRADS)\]|FAILED|rror|PASSED" $OUT/$tag.txt | tee -a $log
        for tool in memcheck racecheck; do
          timeout ${SAN_TIMEOUT:-200} env $e "$cs" --tool $tool --error-exitcode 99 --print-limit 50 \
            build-dev/tests/$t > $OUT/${tag}_san_$tool.txt 2>&1
          echo "[SANITIZER] $t ${e}, $tool: rc=$? $(grep -Eo "(ERROR|RACECHECK) SUMMARY: .*" $OUT/${tag}_san_$tool.txt | tail -1)" | tee -a $log
        done
      done
    done ;;
  linear-test)
    timeout 300 build-dev/tests/test_cuda_linear > $OUT/linear_test.txt 2>&1
    echo "linear-test rc=$?" | tee -a $log
    grep -E "\[LINEAR\]|FAILED|rror|PASSED" $OUT/linear_test.txt | tee -a $log ;;
  head-fac)
    timeout 120 build-dev/tests/test_cuda_attention_head_factored > $OUT/head_fac.txt 2>&1
    echo "head-fac rc=$?" | tee -a $log
    grep -E "\[ATTN_HEAD_FAC\]|FAILED|rror|PASSED" $OUT/head_fac.txt | tee -a $log
    cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
    for tool in racecheck memcheck; do
      timeout 200 "$cs" --tool $tool --kernel-name kns=head_fac --error-exitcode 99 \
        build-dev/tests/test_cuda_attention_head_factored > $OUT/head_fac_$tool.txt 2>&1
      echo "[SANITIZER] head-fac $tool rc=$? $(grep -E "SUMMARY" $OUT/head_fac_$tool.txt | tail -1)" |
        tee -a $log
    done ;;
  vs-cpu)
    timeout 400 build-dev/tests/test_cuda_vs_cpu > $OUT/vs_cpu.txt 2>&1
    echo "vs-cpu rc=$?" | tee -a $log
    grep -E "\[ACCURACY\]|FAILED|rror|PASSED" $OUT/vs_cpu.txt | tee -a $log ;;
  attn-bench)
    build-dev/examples/foxhunt-bench-attention --iters 30 --machine $machine \
      --out $OUT/attn_bench.json 2>&1 | tail -22 | tee -a $log ;;
  step-bench)
    build-dev/examples/foxhunt-bench --batch 16384 --steps 30 --modes multi-tf32,single-tf32 \
      --variant FOXHUNT_ATTN_KERNELS=tc,tc-split --machine $machine \
      --out $OUT/step_bench.json 2>&1 | tail -9 | tee -a $log ;;
  ncu-attn)
    timeout 300 ncu --clock-control none --kernel-name regex:k_attn_tc --launch-count 2 \
      --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
      --section InstructionStats --section LaunchStats --section MemoryWorkloadAnalysis_Tables \
      build-dev/examples/foxhunt-bench-attention --batch 16384 --iters 1 --out /tmp/n.json \
      > $OUT/ncu_attn.txt 2>&1
    echo "ncu rc=$?" | tee -a $log
    grep -E "k_attn_tc|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit|Issued Ipc|Executed Instructions |Stall|Warp Cycles Per Issued|Bank|Shared Memory Configuration|Dynamic Shared" $OUT/ncu_attn.txt | head -80 | tee -a $log ;;
  ncu-iqn)
    timeout 300 ncu --clock-control none --kernel-name "regex:${NCU_RE:-k_iqn_}" --launch-skip ${NCU_SKIP:-3} --launch-count ${NCU_COUNT:-3} \
      --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
      --section LaunchStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
      build-dev/examples/foxhunt-bench --batch 16384 --steps 2 --warmup 0 --modes multi-tf32 \
      --replay 0 --out /tmp/n.json > $OUT/ncu_iqn.txt 2>&1
    echo "ncu rc=$?" | tee -a $log
    grep -E "k_iqn_|k_iql_|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit|Issued Ipc|Stall|Warp Cycles Per Issued|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|L1/TEX Hit|Pipe" $OUT/ncu_iqn.txt | head -120 | tee -a $log ;;
  ncu-src)
    # NCU_ENV="VAR=x": a trial switch; NCU_TAG: the files' suffix (a variant's run beside the
    # default's in one call).
    t=${NCU_TAG:-}
    timeout 300 env ${NCU_ENV:-} ncu --clock-control none \
      --kernel-name "regex:${NCU_RE:-k_iqn_|k_attn_tc}" \
      --launch-skip ${NCU_SKIP:-5} --launch-count ${NCU_COUNT:-5} --section SourceCounters --section WarpStateStats \
      --section SpeedOfLight -o /tmp/src$t \
      build-dev/examples/foxhunt-bench --batch 16384 --steps 2 --warmup 0 --modes single-tf32 \
      --replay 0 --out /tmp/n.json > $OUT/ncu_src_run$t.txt 2>&1
    echo "ncu-src${t} rc=$?" | tee -a $log
    ncu -i /tmp/src$t.ncu-rep --page source --print-source sass --csv > $OUT/ncu_src_sass$t.csv 2>&1
    echo "ncu-src page rc=$? lines=$(wc -l < $OUT/ncu_src_sass$t.csv)" | tee -a $log
    ncu -i /tmp/src$t.ncu-rep --page details > $OUT/ncu_src_details$t.txt 2>&1
    python3 bench/ncu_source_summary.py $OUT/ncu_src_sass$t.csv 8 > $OUT/ncu_src_summary$t.txt 2>&1
    grep -E "instructions,|by reason" $OUT/ncu_src_summary$t.txt | tee -a $log ;;
  ncu-step)
    timeout 200 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
      build-dev/examples/foxhunt-bench --batch 16384 --steps 1 --warmup 0 --modes multi-tf32 \
      --replay 0 --out /tmp/n.json > $OUT/ncu_step.csv 2>&1
    echo "ncu-step rc=$? lines=$(wc -l < $OUT/ncu_step.csv)" | tee -a $log ;;
  ncu-warm)
    # Like ncu-step, single-stream and with warm caches (--cache-control none): per-kernel times
    # closer to what a kernel takes inside the graph. NCU_ENV="VAR=x" sets a trial switch.
    timeout 200 env ${NCU_ENV:-} ncu --clock-control none --cache-control none \
      --metrics gpu__time_duration.sum --csv \
      build-dev/examples/foxhunt-bench --batch 16384 --steps 1 --warmup 0 --modes single-tf32 \
      --replay 0 --out /tmp/n.json > $OUT/ncu_warm${NCU_TAG:-}.csv 2>&1
    echo "ncu-warm rc=$? lines=$(wc -l < $OUT/ncu_warm${NCU_TAG:-}.csv)" | tee -a $log
    python3 bench/ncu_warm_summary.py $OUT/ncu_warm${NCU_TAG:-}.csv \
      "One default step (B = 16384, TF32) single-stream, warm caches: {N} kernels, {T} us" \
      > $OUT/ncu_warm${NCU_TAG:-}.txt 2>&1; head -12 $OUT/ncu_warm${NCU_TAG:-}.txt | tee -a $log ;;
  ncu-roof)
    timeout 400 env ${NCU_ENV:-} ncu --clock-control none --cache-control none --print-units base \
      --metrics "$(python3 -c 'import sys; sys.path.insert(0, "bench"); import ncu_roof_summary as r; print(",".join(r.METRICS))')" \
      --csv build-dev/examples/foxhunt-bench --batch 16384 --steps 1 --warmup 0 --modes single-tf32 \
      --replay 0 --out /tmp/n.json > $OUT/ncu_roof${NCU_TAG:-}.csv 2>&1
    echo "ncu-roof rc=$? lines=$(wc -l < $OUT/ncu_roof${NCU_TAG:-}.csv)" | tee -a $log
    python3 bench/ncu_roof_summary.py $OUT/ncu_roof${NCU_TAG:-}.csv > $OUT/ncu_roof${NCU_TAG:-}.txt 2>&1
    head -40 $OUT/ncu_roof${NCU_TAG:-}.txt | tee -a $log ;;
  vbench)
    # VARIANTS="VAR=a,b VAR2=c,d": one side-by-side run per variable, B = 16384, TF32. Each run
    # writes its whole output to $OUT as it goes and is stopped after VBENCH_TIMEOUT seconds
    # (default 200): a trial that hangs the GPU (two concurrent GEMMs on one cuBLAS workspace
    # did, 2026-12-01) must not take the device call's whole time and every log with it.
    # $VBENCH_MODES: foxhunt-bench's --modes (default multi-tf32,single-tf32); $VBENCH_ARGS: more
    # of its options (e.g. "--iql-gemm sequential,batched").
    for vv in $VARIANTS; do
      f="$OUT/vbench_${vv//[=,]/-}"
      # shellcheck disable=SC2086  # VBENCH_ARGS is a list of words
      timeout ${VBENCH_TIMEOUT:-200} build-dev/examples/foxhunt-bench --batch 16384 --steps 30 \
        --replay 0 --modes ${VBENCH_MODES:-multi-tf32,single-tf32} --variant "$vv" \
        ${VBENCH_ARGS:-} --machine $machine --out "$f.json" > "$f.txt" 2>&1
      echo "vbench $vv rc=$? (124: stopped by the timeout)" | tee -a $log
      tail -12 "$f.txt" | tee -a $log
    done ;;
  rev-bench)
    # Two builds side by side: $REV_TAR, a tarball of an earlier tree made here with
    # `git archive --prefix=old/ REV -- . ':!bench/results' ':!data' > .trial/old.tar` (untracked
    # files travel with the call), built as a second foxhunt-bench, and this tree's; each at
    # B = 16384 ($REV_MODES, default multi-tf32,single-tf32,multi-bf16) in the order old, new,
    # new, old, into rev_N_{old,new}.json and .txt.
    rm -rf /tmp/rev && mkdir -p /tmp/rev && tar xf "${REV_TAR:-.trial/old.tar}" -C /tmp/rev &&
      configure /tmp/rev/old /tmp/rev/build > $OUT/rev_build.txt 2>&1 &&
      cmake --build /tmp/rev/build -j16 --target foxhunt-bench >> $OUT/rev_build.txt 2>&1
    rc=$?
    echo "rev-bench: the old tree's build rc=$rc" | tee -a $log
    n=0
    [ $rc = 0 ] && for k in old new new old; do
      n=$((n + 1))
      if [ $k = old ]; then b=/tmp/rev/build/examples/foxhunt-bench
      else b=build-dev/examples/foxhunt-bench; fi
      timeout 120 $b --batch 16384 --steps 30 --replay 0 \
        --modes ${REV_MODES:-multi-tf32,single-tf32,multi-bf16} --machine $machine \
        --out $OUT/rev_${n}_$k.json > $OUT/rev_${n}_$k.txt 2>&1
      echo "rev-bench $n $k rc=$?" | tee -a $log
      grep -E "ms/step" $OUT/rev_${n}_$k.txt | tee -a $log
    done ;;
  ab-build)
    if [ -n "${AB_PROBE:-}" ]; then
      nvcc -cubin -arch=sm_90a -o /tmp/ab_probe.cubin "$AB_PROBE" > $OUT/ab_probe.txt 2>&1 &&
        cuobjdump -sass /tmp/ab_probe.cubin >> $OUT/ab_probe.txt 2>&1
      echo "ab-probe rc=$? ($OUT/ab_probe.txt)" | tee -a $log
    fi
    # bench/ab_carry.sh's build and run, here on the device (cmocka from .devdeps for the tests).
    cm="-DCMAKE_PREFIX_PATH=$d/usr -Dcmocka_DIR=$d/usr/lib/x86_64-linux-gnu/cmake/cmocka"
    # shellcheck disable=SC2086  # AB_DEFS is a list of definitions
    FOXHUNT_CMAKE_ARGS="$cm ${FOXHUNT_CMAKE_ARGS:-}" \
      bash bench/ab_carry.sh build ${AB_DEFS:-} > $OUT/ab_build.txt 2>&1 &&
      OUT=$OUT bash bench/ab_carry.sh run
    echo "ab-build rc=$?" | tee -a $log ;;
  env-tests)
    # $TEST_SETS: "VAR=x|test_a test_b;VAR2=y|test_c": each set's test binaries with its
    # environment (a trial's path).
    IFS=';' read -ra sets <<< "${TEST_SETS:-}"
    for set in "${sets[@]}"; do
      envs=${set%%|*}
      for t in ${set#*|}; do
        f="$OUT/env_${envs//[=, ]/-}_$t.txt"
        # shellcheck disable=SC2086  # envs is a list of words
        timeout 300 env $envs build-dev/tests/$t > "$f" 2>&1
        echo "$t with $envs rc=$?" | tee -a $log
        grep -E "^\[[A-Z-]+\]|FAILED|PASSED" "$f" | head -40 | tee -a $log
      done
    done ;;
  iqn-bench)
    build-dev/examples/foxhunt-bench --batch 16384 --steps 30 --modes multi-tf32,single-tf32 \
      --variant FOXHUNT_IQN_KERNELS=unfused,target,online,fused --machine $machine \
      --out $OUT/iqn_bench.json 2>&1 | tail -11 | tee -a $log ;;
  nccl|nccl2)
    bin=test_cuda_nccl; [ "$s" = nccl2 ] && bin=test_cuda_nccl_2gpu
    timeout 400 build-dev/tests/$bin > $OUT/$s.txt 2>&1
    echo "$s rc=$? (77 = skipped)" | tee -a $log
    grep -E "\[(NCCL|NCCL2|DETERMINISM)\]|skipped|FAILED|rror|PASSED" $OUT/$s.txt | tee -a $log ;;
  dp-bench)
    build-dev/examples/foxhunt-bench-dp --batch 16384 --steps 50 --machine $machine \
      --out $OUT/dp_bench.json 2>&1 | tail -10 | tee -a $log ;;
  dp-train)
    W=$(nvidia-smi -L | wc -l); id=/tmp/foxhunt-nccl.$$
    for r in $(seq 0 $((W-1))); do
      timeout 500 build-dev/examples/foxhunt-dp --world $W --rank $r --id $id --steps 600 \
        > $OUT/dp_train_$r.txt 2>&1 &
    done; wait
    tail -n 3 $OUT/dp_train_*.txt | tee -a $log ;;
  pytest-cuda)
    FOXHUNT_LIBRARY=$PWD/build-dev/libfoxhunt.so FOXHUNT_TEST_BACKEND=cuda PYTHONUNBUFFERED=1 \
      FOXHUNT_ORACLE_REPORT=$OUT/oracle_errors_cuda.txt \
      timeout 300 python3 -m pytest -q -p no:cacheprovider bindings/python/tests tests/python \
      > $OUT/pytest_cuda.txt 2>&1
    echo "pytest-cuda rc=$?" | tee -a $log
    tail -3 $OUT/pytest_cuda.txt | tee -a $log ;;
  sanitize)
    # Every kernel, cuBLAS's included; racecheck takes about 170 s of it on the H200.
    cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
    for tool in ${SAN_TOOLS:-memcheck synccheck racecheck}; do
      extra=; [ $tool = memcheck ] && extra="--leak-check full"
      t3=$(date +%s)
      FOXHUNT_TEST_TMP=/tmp OPENBLAS_NUM_THREADS=4 timeout ${SAN_TIMEOUT:-400} "$cs" --tool $tool $extra \
        --error-exitcode 99 --print-limit 50 build-dev/tests/test_cuda_sanitize \
        > $OUT/sanitize_$tool.txt 2>&1
      rc=$?
      summary=$(grep -Eo "ERROR SUMMARY: [0-9]+ errors?" $OUT/sanitize_$tool.txt | tail -1)
      hazards=$(grep -Eo "RACECHECK SUMMARY: [0-9]+ hazards? displayed \([0-9]+ errors?, [0-9]+ warnings?\)" \
                  $OUT/sanitize_$tool.txt | tail -1)
      echo "[SANITIZER] $tool: rc=$rc ${summary:-no summary} ${hazards} in $(( $(date +%s) - t3 )) s ($(grep -c '^\[SANITIZE\]' $OUT/sanitize_$tool.txt) configs done)" | tee -a $log
    done ;;
  bench)
    PYTHONUNBUFFERED=1 timeout 420 build-dev/examples/foxhunt-bench --batch 16384 --steps 30 --peer \
      --machine $machine --out $OUT/bench.json 2>&1 | tail -30 | tee -a $log ;;
  wgrad-layout)
    PYTHONUNBUFFERED=1 timeout 200 python3 bench/probe_wgrad_layout.py \
      --out $OUT/wgrad_layout.json > $OUT/wgrad_layout.txt 2>&1
    echo "wgrad-layout rc=$?" | tee -a $log; tee -a $log < $OUT/wgrad_layout.txt ;;
  timeline)
    for bt in ${TIMELINE_BATCH:-16384}; do
      for m in ${TIMELINE_MODES:-multi-tf32 single-tf32}; do
        for te in "" ${TIMELINE_ENV:-}; do
          f=timeline_$m; [ "$bt" = 16384 ] || f=timeline_b${bt}_$m
          [ -z "$te" ] || f=${f}_env
          # shellcheck disable=SC2086  # te is one VAR=x word or none
          timeout 120 env $te build-dev/examples/foxhunt-timeline --batch $bt --mode $m \
            --machine $machine --out $OUT/$f.json > $OUT/$f.txt 2>&1
          echo "timeline B=$bt $m ${te:-(default)} rc=$?" | tee -a $log
          grep -A40 "^span" $OUT/$f.txt | tee -a $log
        done
      done
    done ;;
  bench-sizes)
    timeout 200 build-dev/examples/foxhunt-bench --batch 1024,4096,65536 --steps 30 --replay 0 \
      --modes multi-tf32,single-tf32 --machine $machine --out $OUT/bench_sizes.json 2>&1 | tail -12 | tee -a $log ;;
  trainer)
    timeout 400 build-dev/examples/foxhunt-trainer --backend cuda --seeds 1 --steps 1000 \
      --out $OUT/trainer-run > $OUT/trainer.txt 2>&1
    echo "trainer rc=$?" | tee -a $log
    grep -vE "^\s*$" $OUT/trainer.txt | tail -25 | tee -a $log ;;
  trainer-math)
    for m in tf32 bf16; do
      timeout 200 build-dev/examples/foxhunt-trainer --backend cuda --seeds 1 --steps 1000 \
        --patience 0 --eval-every 100 --math $m --out $OUT/trainer-$m > $OUT/trainer_$m.txt 2>&1
      echo "trainer --math $m rc=$?" | tee -a $log
      grep -E "agent, 1 seed|speed:" $OUT/trainer_$m.txt | tee -a $log
    done
    echo "step | tf32: td iql_hi iqn attn conf valid_sharpe | bf16: the same" | tee -a $log
    paste -d, $OUT/trainer-tf32/learning_curve.csv $OUT/trainer-bf16/learning_curve.csv | tail -n +2 |
      awk -F, '{printf "%5s | %.4f %.5f %.3f %.3f %.4f %+.2f | %.4f %.5f %.3f %.3f %.4f %+.2f\n",
        $2, $4, $8, $10, $11, $12, $15, $22, $26, $28, $29, $30, $33}' | tee -a $log ;;
  bf16-test)
    for t in test_cuda_bf16 test_cuda_determinism test_cuda_memory_plan; do
      timeout 400 build-dev/tests/$t > $OUT/$t.txt 2>&1
      echo "$t rc=$?" | tee -a $log
      grep -E "\[(LEARNING|DETERMINISM|GEMM_BF16|MEMORY)\]|FAILED|rror|PASSED" $OUT/$t.txt | tee -a $log
    done ;;
  mode-bench)
    timeout 200 build-dev/examples/foxhunt-bench --batch 16384 --steps 30 --replay 0 \
      --modes multi-tf32,single-tf32,multi-bf16,single-bf16 --machine $machine \
      --out $OUT/mode_bench.json 2>&1 | tail -8 | tee -a $log ;;
  examples)
    FOXHUNT_LIBRARY=$PWD/build-dev/libfoxhunt.so FOXHUNT_TEST_BACKEND=cuda \
      timeout 400 python3 -m pytest -q -p no:cacheprovider tests/examples > $OUT/examples_cuda.txt 2>&1
    echo "examples rc=$?" | tee -a $log
    tail -5 $OUT/examples_cuda.txt | tee -a $log ;;
  digest)
    python3 tests/python/state_digest.py build-dev/libfoxhunt.so 2>&1 | tail -6 | tee -a $log ;;
  digest-env)
    # The digests with the environment $DIGEST_ENV ("VAR=a VAR2=b": a trial switch's old path)
    # against the default: equal lines mean the switch leaves every bit as it was.
    # shellcheck disable=SC2086  # DIGEST_ARGS and DIGEST_ENV are lists of words
    timeout 300 python3 tests/python/state_digest.py build-dev/libfoxhunt.so ${DIGEST_ARGS:-} > $OUT/digest_default.txt 2>&1
    # shellcheck disable=SC2086
    timeout 300 env $DIGEST_ENV python3 tests/python/state_digest.py build-dev/libfoxhunt.so ${DIGEST_ARGS:-} > $OUT/digest_env.txt 2>&1
    if diff $OUT/digest_default.txt $OUT/digest_env.txt > /dev/null; then
      echo "digest-env: $DIGEST_ENV bitwise equal to the default in every mode" | tee -a $log
    else
      echo "digest-env: $DIGEST_ENV DIFFERS from the default" | tee -a $log
      diff $OUT/digest_default.txt $OUT/digest_env.txt | head -20 | tee -a $log
    fi ;;
  *) echo "unknown step $s" | tee -a $log ;;
  esac
  echo "$s: $(( $(date +%s) - t1 )) s" | tee -a $log
done
