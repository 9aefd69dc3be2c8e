#!/bin/bash
# Re-run at the final code (after the review's fixes to the attention head's loads and tests):
# every CUDA test, the head's kernel under compute-sanitizer, the benchmark (no peer), sizes.
d=$(mktemp -d); for f in .devdeps/*.deb; do dpkg -x "$f" "$d"; done
export CMAKE_PREFIX_PATH=$d/usr LD_LIBRARY_PATH=$d/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH CPATH=$d/usr/include
FIN=$OUT; export OUT=/tmp/of2; mkdir -p $OUT
bash bench/run_device_quick.sh ctest-par > $OUT/q0.txt 2>&1; tail -6 $OUT/q0.txt
cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
build-dev/tests/test_cuda_attention_head 2>&1 | grep -E "ATTN_HEAD|PASSED|FAILED"
for tool in memcheck racecheck; do
  timeout 150 $cs --tool $tool build-dev/tests/test_cuda_attention_head > $OUT/san_$tool.txt 2>&1
  echo "[SANITIZER] test_cuda_attention_head $tool rc=$? $(grep -Eo '(ERROR SUMMARY: [0-9]+ errors?|RACECHECK SUMMARY: [0-9]+ hazards? displayed[^)]*\))' $OUT/san_$tool.txt | tail -1)"
done
grep -h "ACCURACY\] default (B=16384)\|\[GRAPH\]\|\[MEMORY\] B=16384" build-dev/Testing/Temporary/LastTest.log | head -12
timeout 200 build-dev/examples/foxhunt-bench --batch 16384 --steps 30 --machine h200 --out $OUT/bench.json > $OUT/bench.txt 2>&1
grep -A8 "batch mode" $OUT/bench.txt
timeout 100 build-dev/examples/foxhunt-bench --batch 1024,4096,65536 --steps 30 --replay 0 --modes multi-tf32,single-tf32 --machine h200 --out $OUT/sizes.json > $OUT/sizes.txt 2>&1
grep -A8 "batch mode" $OUT/sizes.txt
mkdir -p $FIN/r; cp $OUT/bench.json $OUT/sizes.json $FIN/r/; grep -E "Test +#|tests passed" $OUT/ctest_par.txt > $FIN/r/ctest_par.txt
cp build-dev/Testing/Temporary/LastTest.log $FIN/r/lasttest.log
