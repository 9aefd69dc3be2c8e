#!/usr/bin/env bash
# The main job: trains the agent on the real market data (examples/data) for several seeds and
# reports it out of sample beside buy & hold, flat and momentum; on the GPU when there is one,
# else on the CPU at a size that takes a few minutes. Options go to the trainer (--help lists
# them; --help and --version build nothing). The build's output goes to build/setup.log;
# FOXHUNT_CUDA=OFF skips the CUDA backend (see scripts/setup.sh). Plots are drawn when
# python3 has matplotlib (the set-up installs Debian's).
set -euo pipefail
cd "$(dirname "$0")/.."
trainer=build/examples/foxhunt-trainer
out=foxhunt-run
prev=""
for a in "$@"; do
  case "$a" in
    -h|--help)
      [ "$prev" = "--out" ] || [ "$prev" = "--data" ] || { cat examples/trainer/usage.txt; exit 0; } ;;
    --version)
      if [ -x "$trainer" ]; then exec "$trainer" --version; fi
      v=$(sed -n 's/^#define FOXHUNT_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\).*/\2/p' include/foxhunt.h | paste -sd.)
      echo "foxhunt-trainer $v (not built yet: bash scripts/run-example.sh builds it)"
      exit 0 ;;
  esac
  [ "$prev" = "--out" ] && out=$a
  prev=$a
done
bash scripts/setup.sh --quiet
"$trainer" "$@"
if /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  /usr/bin/python3 examples/plot.py "$out"
else
  echo "no plots: /usr/bin/python3 lacks matplotlib (apt-get install python3-matplotlib), then" \
       "python3 examples/plot.py $out"
fi
