#!/bin/bash
# The CPU warp emulations of tests/warp_emu/README.md on this tree's kernel sources (no GPU
# needed): prepares the code (prepare.py), builds each emulation with the host C++ compiler
# ($CXX, else g++) and runs it. Exit status 0 when all pass.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$here/inc" "$work/inc"
"${PYTHON:-python3}" "$here/prepare.py" "$repo" "$work"
# WARP_EMU_FLAGS: more compiler flags (the sanitizer build passes ASan and UBSan's, which catch
# an index past the emulated shared memory or an output).
# shellcheck disable=SC2206  # WARP_EMU_FLAGS is a list of words
flags=(-std=c++20 -O1 -w -I"$work" -I"$work/inc" -I"$repo/src" -I"$repo/include" -pthread
       ${WARP_EMU_FLAGS:-})
status=0
for emu in attn_tc iqn_online iqn_target iqn_backward iqn_dwphi; do
    "${CXX:-g++}" "${flags[@]}" "$here/$emu.cpp" -o "$work/$emu"
    echo "== $emu"
    # Lanes that part ways at a barrier would wait for ever: a time limit turns that into a failure.
    timeout 300 "$work/$emu" || status=1
done
exit $status
