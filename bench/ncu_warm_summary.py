#!/usr/bin/env python3
"""One step's kernels from `bench/run_device_quick.sh ncu-warm`: time by kernel and in launch order.

Input: the CSV of `ncu --metrics gpu__time_duration.sum --csv` over foxhunt-bench (one kernel per
row). The bench runs several steps; the summary takes the second (from its k_her to the next
k_her), which has warm caches and no first-launch effects. Kernel names are shortened (namespaces
and argument lists dropped).

Usage: ncu_warm_summary.py NCU.csv "HEADER"   ({N} and {T} in HEADER become the kernel count and
the total microseconds)
"""
import collections
import csv
import re
import sys


def short(name):
    name = re.sub(r"^void ", "", name)
    depth = 0
    for i in range(len(name) - 1, -1, -1):  # drop the last top-level argument list
        if name[i] == ")":
            depth += 1
        elif name[i] == "(":
            depth -= 1
            if depth == 0:
                name = name[:i]
                break
    for s in ("fh::", "cuda::", "<unnamed>::"):
        name = name.replace(s, "")
    return re.sub(r"\((int|bool|unsigned int)\)", "", name)


def main():
    path, header = sys.argv[1], sys.argv[2]
    rows = list(csv.DictReader(line for line in open(path) if line.startswith('"')))
    her = [i for i, r in enumerate(rows) if "k_her(" in r["Kernel Name"]]
    if len(her) < 3:
        sys.exit(f"{path}: need three steps (k_her launches), found {len(her)}")
    if rows[her[1]]["Metric Unit"] not in ("nsecond", "ns"):
        sys.exit(f"{path}: durations in {rows[her[1]]['Metric Unit']}, expected nanoseconds")
    seg = [(short(r["Kernel Name"]), float(r["Metric Value"].replace(",", "")) / 1000.0, r["Grid Size"])
           for r in rows[her[1]:her[2]]]
    total = sum(t for _, t, _ in seg)
    print(header.replace("{N}", str(len(seg))).replace("{T}", f"{total:.1f}"))
    by_name = collections.defaultdict(lambda: [0.0, 0])
    for n, t, _ in seg:
        by_name[n][0] += t
        by_name[n][1] += 1
    for n, (t, c) in sorted(by_name.items(), key=lambda kv: -kv[1][0]):
        print(f"{t:9.1f} us {100 * t / total:5.1f}% {c:3d}  {n}")
    print("\nIn launch order (us, grid, kernel):")
    for n, t, g in seg:
        print(f"{t:9.1f} {g:>14}  {n}")


if __name__ == "__main__":
    main()
