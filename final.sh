#!/bin/bash
# Final call of 2026-12-03's sixth session: build, every CUDA test, the attention head's kernel
# under compute-sanitizer, the binding and oracle tests on CUDA, the benchmark with the peer,
# the other sizes.
d=$(mktemp -d); for f in .devdeps/*.deb; do dpkg -x "$f" "$d"; done
export CMAKE_PREFIX_PATH=$d/usr LD_LIBRARY_PATH=$d/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH CPATH=$d/usr/include
FIN=$OUT; export OUT=/tmp/of; mkdir -p $OUT
bash bench/run_device_quick.sh ctest-par > $OUT/q0.txt 2>&1; tail -8 $OUT/q0.txt
cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
build-dev/tests/test_cuda_attention_head 2>&1 | grep -E "ATTN_HEAD|PASSED|FAILED"
for tool in memcheck racecheck; do
  timeout 200 $cs --tool $tool build-dev/tests/test_cuda_attention_head > $OUT/san_$tool.txt 2>&1
  echo "[SANITIZER] test_cuda_attention_head $tool rc=$? $(grep -Eo '(ERROR SUMMARY: [0-9]+ errors?|RACECHECK SUMMARY: [0-9]+ hazards? displayed[^)]*\))' $OUT/san_$tool.txt | tail -1)"
done
grep -h "ACCURACY" build-dev/Testing/Temporary/LastTest.log | head -20
grep -h "\[GRAPH\]\|\[MEMORY\]" build-dev/Testing/Temporary/LastTest.log | head -6
bash bench/run_device_quick.sh pytest-cuda bench bench-sizes > $OUT/q1.txt 2>&1; tail -60 $OUT/q1.txt
tail -25 $OUT/oracle_errors_cuda.txt 2>/dev/null
mkdir -p $FIN/r; cp $OUT/bench.json $OUT/bench_sizes.json $FIN/r/ 2>/dev/null
ls $OUT/*peer* 2>/dev/null; cp $OUT/*peer*.json $FIN/r/ 2>/dev/null
grep -E "Test +#|tests passed" $OUT/ctest_par.txt > $FIN/r/ctest_par.txt
cp $OUT/pytest_cuda.txt $OUT/oracle_errors_cuda.txt $FIN/r/ 2>/dev/null
cp build-dev/Testing/Temporary/LastTest.log $FIN/r/lasttest.log 2>/dev/null
