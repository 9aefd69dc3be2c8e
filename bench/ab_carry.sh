#!/bin/bash
# A side-by-side benchmark of trials that are compile definitions, built on the development
# machine (no GPU needed) so that the device call only runs them: no build there, a call of about
# a minute instead of several (run_device_quick.sh ab-build builds on the device instead).
#   here:    bash bench/ab_carry.sh build NAME=v|@REV [...]
#            builds the library as build-dev is built (Release, this tree) and once per
#            definition (-DNAME=v for the CUDA and host compilers) or commit (@REV: the tree at
#            that commit, a git worktree; a before/after table), and foxhunt-bench, into
#            build-carry/ (git-ignored, ~10 MB a library); $FOXHUNT_CMAKE_ARGS: more CMake options
#            $AB_TESTS: test binaries built and carried with each variant too (~9 MB each;
#            the carry's limit is 64 MiB)
#   device:  bash bench/ab_carry.sh run      (run's carry: ["build-carry", ".devdeps"])
#            foxhunt-bench at B = 16384 ($VBENCH_MODES, default multi-tf32,single-tf32) on each
#            library in order, then in reverse, each run's JSON and table under $OUT; then each
#            variant's test binaries (cmocka from .devdeps, bench/device_env.sh)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
carry="$top/build-carry"
case "${1:-}" in
build)
  shift
  rm -rf "$carry"
  mkdir -p "$carry"
  names=()
  for def in base "$@"; do
    name=${def//=/-}
    name=${name/#@/at-}
    b="$top/build-ab-$name"
    src=$top
    flags=()
    if [ "${def:0:1}" = @ ]; then
      src="$top/build-ab-src-$name"
      rm -rf "$src"
      git -C "$top" worktree prune
      git -C "$top" worktree add -q --detach "$src" "${def:1}"
    elif [ "$def" != base ]; then
      flags=(-DCMAKE_CUDA_FLAGS="-D$def" -DCMAKE_CXX_FLAGS="-D$def")
    fi
    # shellcheck disable=SC2086  # FOXHUNT_CMAKE_ARGS is a list of words
    cmake -S "$src" -B "$b" -DFOXHUNT_CUDA=ON -DCMAKE_BUILD_TYPE=Release "${flags[@]}" \
      ${FOXHUNT_CMAKE_ARGS:-} > /dev/null
    # shellcheck disable=SC2086  # AB_TESTS is a list of target names
    cmake --build "$b" -j"$(nproc)" --target foxhunt foxhunt-bench ${AB_TESTS:-} \
      > "$b/ab_build.txt" 2>&1 || { tail -20 "$b/ab_build.txt"; exit 1; }
    # A commit's worktree is needed only for its build.
    [ "$src" != "$top" ] && git -C "$top" worktree remove --force "$src"
    mkdir -p "$carry/$name"
    cp -L "$b/libfoxhunt.so.0" "$carry/$name/"
    # The variants' tests (the default's ran where the default was tested).
    if [ "$def" != base ]; then
      for t in ${AB_TESTS:-}; do cp "$b/tests/$t" "$carry/$name/"; done
    fi
    [ "$def" = base ] && cp "$b/examples/foxhunt-bench" "$carry/"
    names+=("$name")
  done
  echo "${names[*]}" > "$carry/variants"
  du -sh "$carry" ;;
run)
  OUT=${OUT:-/tmp/out}
  mkdir -p "$OUT"
  machine=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 |
    tr ' ' '-' || true)
  read -ra names < "$carry/variants"
  # The libraries were linked here: say what the loader finds there.
  LD_LIBRARY_PATH="$carry/base" ldd "$carry/foxhunt-bench" | grep -E "foxhunt|not found" |
    tee -a "$OUT/ab_log.txt"
  n=0
  # shellcheck disable=SC2046  # the list reversed, word by word
  for v in "${names[@]}" $(printf '%s\n' "${names[@]}" | tac); do
    n=$((n + 1))
    rc=0
    LD_LIBRARY_PATH="$carry/$v" timeout "${VBENCH_TIMEOUT:-60}" "$carry/foxhunt-bench" \
      --batch 16384 --steps 30 --replay 0 --modes "${VBENCH_MODES:-multi-tf32,single-tf32}" \
      --machine "$machine" --out "$OUT/ab_${n}_$v.json" > "$OUT/ab_${n}_$v.txt" 2>&1 || rc=$?
    echo "ab $n: $v rc=$rc" | tee -a "$OUT/ab_log.txt"
    grep -E "^ +16384" "$OUT/ab_${n}_$v.txt" | tee -a "$OUT/ab_log.txt" || true
  done
  if compgen -G "$carry/*/test_*" > /dev/null; then
    set +eu
    (cd "$top" && . bench/device_env.sh
     for t in "$carry"/*/test_*; do
       v=$(basename "$(dirname "$t")")
       f="$OUT/ab_test_${v}_$(basename "$t").txt"
       timeout "${AB_TEST_TIMEOUT:-200}" "$t" > "$f" 2>&1
       rc=$?
       echo "$(basename "$t") with $v rc=$rc (77: skipped)" | tee -a "$OUT/ab_log.txt"
       grep -E "FAILED|PASSED|worst [0-9.]+ of the bound" "$f" | tail -5 | tee -a "$OUT/ab_log.txt"
     done)
  fi ;;
*)
  echo "usage: bash bench/ab_carry.sh build NAME=v|@REV ... | run" >&2
  exit 2 ;;
esac
