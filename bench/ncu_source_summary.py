#!/usr/bin/env python3
"""Where a kernel's warps wait, per instruction: a summary of Nsight Compute's source page.

Input: the CSV of `ncu -i REPORT --page source --print-source sass --csv` (bench/run_device_quick.sh
ncu-src writes it), which lists each profiled kernel's SASS with its warp-stall samples by reason.
Output, per kernel (its first profiled launch when there are several): the total samples, the largest stall reasons, the samples by opcode and the
instructions with the most samples (their index in the kernel's listing and their two largest
reasons).

Usage: ncu_source_summary.py SASS.csv [TOP]
"""
import collections
import csv
import sys


def kernels(path):
    out, cur, header = [], None, None
    with open(path, newline="") as f:
        for r in csv.reader(f):
            if not r:
                continue
            if r[0] == "Kernel Name":
                cur = []
                out.append((r[1], cur))
                header = None
            elif r[0] == "Address":
                header = r
            elif header and cur is not None:
                cur.append(dict(zip(header, r)))
    return out


def summarize(name, ins, top):
    reasons = [h for h in ins[0] if h.startswith("stall_") and "(Not" not in h]
    samples = lambda i: int(i["Warp Stall Sampling (All Samples)"] or 0)
    by_reason = collections.Counter()
    by_op = collections.Counter()
    for i in ins:
        for h in reasons:
            by_reason[h[6:]] += int(i[h] or 0)
        words = i["Source"].split()
        op = words[1] if words and words[0].startswith("@") and len(words) > 1 else (words or ["?"])[0]
        by_op[op.split(".")[0]] += samples(i)
    total = sum(by_reason.values()) or 1
    print(f"{name}: {len(ins)} instructions, {total} stall samples")
    print("  by reason: " + " ".join(f"{k}={v * 100 / total:.1f}%" for k, v in by_reason.most_common(8)))
    print("  by opcode: " + " ".join(f"{k}={v * 100 / total:.1f}%" for k, v in by_op.most_common(10)))
    for j in sorted(range(len(ins)), key=lambda j: -samples(ins[j]))[:top]:
        i = ins[j]
        rs = sorted(((int(i[h] or 0), h[6:]) for h in reasons), reverse=True)[:2]
        print(f"  {j:5d} {samples(i) * 100 / total:5.2f}%  {i['Source'].strip()[:64]:64s} "
              f"{rs[0][1]}={rs[0][0]} {rs[1][1]}={rs[1][0]}")


def main():
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 12
    seen = set()
    for name, ins in kernels(sys.argv[1]):
        if ins and name not in seen:
            seen.add(name)
            summarize(name, ins, top)
            print()


if __name__ == "__main__":
    main()
