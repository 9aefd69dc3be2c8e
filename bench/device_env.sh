# Sourced by the GPU run scripts (run_device.sh, run_device_quick.sh): $OUT and its log, and the
# test dependencies that the GPU machine lacks (cmocka, Random123), unpacked from .devdeps
# (../shared/tools/device-prep.sh makes it; the device run carries it) into $d.
set -o pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
d=$(mktemp -d); for f in .devdeps/*.deb; do dpkg -x "$f" "$d"; done
export CMAKE_PREFIX_PATH=$d/usr LD_LIBRARY_PATH=$d/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH CPATH=$d/usr/include
log=$OUT/log.txt
# The machine's name for the benchmarks' --machine: h200 or h100 (nvidia-smi's card name).
machine=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 |
          grep -Eio 'h100|h200' | tr 'A-Z' 'a-z')
machine=${machine:-unknown-gpu}
