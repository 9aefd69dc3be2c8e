#!/usr/bin/env python3
"""One step's kernels from `bench/run_device_quick.sh ncu-roof`: where each kernel sits against
the GPU's two ceilings, HBM bandwidth and SM issue.

Input: the CSV of `ncu --print-units base --csv --metrics <the METRICS below>` over foxhunt-bench
(one row per kernel and metric). As ncu_warm_summary.py does, it takes the second step (from its
k_her to the next k_her: warm caches, no first-launch effects).

Output, per kernel name (summed over its launches) and then in launch order: time, DRAM bytes
moved, the bandwidth that is, DRAM and SM throughput as % of peak (time-weighted over launches),
the tensor pipe's active cycles as % of peak, and the bound: "mem" where DRAM throughput is the
larger share, "sm" otherwise.

Usage: ncu_roof_summary.py NCU.csv
"""
import collections
import csv
import sys

from ncu_warm_summary import short

TIME = "gpu__time_duration.sum"
READ, WRITE = "dram__bytes_read.sum", "dram__bytes_write.sum"
DRAM = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
SM = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
TENSOR = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed"
METRICS = [TIME, READ, WRITE, DRAM, SM, TENSOR]


def launches(path):
    """[(kernel, grid, {metric: value})] in launch order."""
    rows = csv.DictReader(line for line in open(path) if line.startswith('"'))
    by_id = collections.OrderedDict()
    for r in rows:
        k = by_id.setdefault(r["ID"], (short(r["Kernel Name"]), r["Grid Size"], {}))
        k[2][r["Metric Name"]] = float(r["Metric Value"].replace(",", ""))
    return list(by_id.values())


def line(name, t_ns, bytes_, dram, sm, tensor, count=""):
    gbps = bytes_ / t_ns if t_ns else 0.0  # bytes per ns = GB/s
    bound = "mem" if dram > sm else "sm"
    return (f"{t_ns / 1000:9.1f} {bytes_ / 2**20:9.1f} {gbps:8.0f} {dram:6.1f} {sm:6.1f} "
            f"{tensor:6.1f}  {bound:3s} {count:>4}  {name}")


def main():
    ks = launches(sys.argv[1])
    her = [i for i, k in enumerate(ks) if k[0] == "k_her"]
    if len(her) < 3:
        sys.exit(f"{sys.argv[1]}: need three steps (k_her launches), found {len(her)}")
    seg = ks[her[1]:her[2]]
    missing = [m for m in METRICS if m not in seg[0][2]]
    if missing:
        sys.exit(f"{sys.argv[1]}: metrics missing: {', '.join(missing)}")
    total_t = sum(k[2][TIME] for k in seg)
    total_b = sum(k[2][READ] + k[2][WRITE] for k in seg)
    print(f"One default step (B = 16384, TF32) single-stream, warm caches: {len(seg)} kernels, "
          f"{total_t / 1000:.1f} us, {total_b / 2**20:.1f} MiB to and from DRAM")
    head = "       us       MiB     GB/s  dram%    sm%  tens%  bnd    n  kernel"
    print(head)
    agg = collections.defaultdict(lambda: [0.0, 0.0, 0.0, 0.0, 0.0, 0])
    for n, _, m in seg:
        a = agg[n]
        t = m[TIME]
        a[0] += t
        a[1] += m[READ] + m[WRITE]
        a[2] += m[DRAM] * t
        a[3] += m[SM] * t
        a[4] += m[TENSOR] * t
        a[5] += 1
    for n, a in sorted(agg.items(), key=lambda kv: -kv[1][0]):
        print(line(n, a[0], a[1], a[2] / a[0], a[3] / a[0], a[4] / a[0], a[5]))
    print("\nIn launch order:")
    print(head.replace("    n  kernel", "       kernel, grid"))
    for n, g, m in seg:
        print(line(n, m[TIME], m[READ] + m[WRITE], m[DRAM], m[SM], m[TENSOR]) + f", {g}")


if __name__ == "__main__":
    main()
