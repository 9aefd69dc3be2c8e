#!/bin/bash
# Final call A (seventh session of 2026-12-03): the CUDA tests, the binding and oracle tests, memcheck.
FIN=$OUT; export OUT=/tmp/fa; mkdir -p $OUT
SAN_TOOLS="memcheck" bash bench/run_device_quick.sh ctest-par pytest-cuda sanitize > $OUT/quick.txt 2>&1
tail -25 $OUT/quick.txt
grep -E "\[(IQN|IQL|BRANCH-GRADS|GEMM_BF16|ACCURACY|DETERMINISM|LEARNING|GRAPH)\]" build-dev/Testing/Temporary/LastTest.log > $OUT/tagged.txt 2>/dev/null; wc -l $OUT/tagged.txt
grep -E "ACCURACY\]|GRAPH\]" $OUT/tagged.txt | head -30
mkdir -p $FIN; tar czf $FIN/logs.tgz -C $OUT . 2>/dev/null
