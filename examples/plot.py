#!/usr/bin/env python3
"""Plots of the examples' CSV files, with matplotlib (Debian: python3-matplotlib).

    python3 examples/plot.py DIR

writes, for the files found in DIR:
  learning_curve.csv -> learning_curve.png  (foxhunt-trainer: TD loss, q_mean and validation
                                              Sharpe per check, one line per seed)
  equity.csv         -> equity.png          (foxhunt-trainer: the test period, agent per seed
                                              against buy & hold, momentum and flat)
  her_success.csv    -> her_success.png     (the HER example: success rate as it trains, HER
                                              on against off)
Each PNG carries, in its "Description" text chunk, a JSON summary of what it plots (the last
value of every line), so a test can check a figure against the CSV it came from.
"""
import csv
import json
import os
import sys
from collections import defaultdict

try:
    import matplotlib
except ImportError:
    sys.exit("examples/plot.py needs matplotlib, which %s cannot import: run it with an "
             "interpreter that has it (Debian: apt-get install python3-matplotlib, then "
             "/usr/bin/python3 examples/plot.py DIR)" % sys.executable)

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def save(fig, path, summary):
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Description": json.dumps(summary, sort_keys=True)})
    plt.close(fig)
    print("wrote", path)


def plot_learning_curve(rows, path):
    by_seed = defaultdict(list)
    for r in rows:
        by_seed[r["seed"]].append(r)
    fig, axes = plt.subplots(3, 1, figsize=(8, 8), sharex=True)
    summary = {}
    for seed, rs in by_seed.items():
        steps = [int(r["step"]) for r in rs]
        sharpe = [float(r["valid_sharpe"]) for r in rs]
        best = max(range(len(rs)), key=lambda i: (sharpe[i], -i))  # first maximum
        train = [float(r["train_sharpe"]) for r in rs]
        line, = axes[0].plot(steps, [float(r["td_loss"]) for r in rs], label="seed " + seed)
        color = line.get_color()
        axes[1].plot(steps, [float(r["q_mean"]) for r in rs], color=color)
        axes[2].plot(steps, sharpe, color=color)
        axes[2].plot(steps, train, color=color, linestyle=":")
        axes[2].plot([steps[best]], [sharpe[best]], "*", color=color, markersize=12)
        summary[seed] = {"checks": len(rs), "last_step": steps[-1], "best_step": steps[best],
                         "best_valid_sharpe": sharpe[best], "last_train_sharpe": train[-1]}
    axes[0].set_ylabel("TD loss")
    axes[1].set_ylabel("q_mean")
    axes[2].set_ylabel("Sharpe (annualised)")
    axes[2].plot([], [], color="black", label="validation (* = checkpoint kept)")
    axes[2].plot([], [], color="black", linestyle=":", label="training days (in sample)")
    axes[2].legend(fontsize="small")
    axes[2].set_xlabel("training step")
    axes[0].legend(fontsize="small")
    axes[0].set_title("foxhunt-trainer: learning curve")
    save(fig, path, summary)


def plot_equity(rows, path):
    years = [float(r["year"]) for r in rows]
    columns = [c for c in rows[0] if c != "year"]
    styles = {"buy_hold": ("buy & hold", "black", 2.0), "momentum": ("momentum", "tab:blue", 1.5),
              "flat": ("flat", "grey", 1.0)}
    fig, ax = plt.subplots(figsize=(9, 5))
    summary = {}
    # the seeds in colours that none of the baselines uses
    palette = iter([plt.cm.tab10(i) for i in (1, 2, 3, 4, 5, 6, 8, 9)] * 100)
    for c in columns:
        values = [float(r[c]) for r in rows]
        summary[c] = values[-1]
        if c in styles:
            label, color, width = styles[c]
            ax.plot(years, values, label=label, color=color, linewidth=width)
        else:
            ax.plot(years, values, label=c.replace("agent_seed_", "agent, seed "),
                    color=next(palette), linewidth=0.9, alpha=0.8)
    ax.axhline(1.0, color="grey", linewidth=0.5)
    ax.set_xlabel("year (test period, out of sample)")
    ax.set_ylabel("value of capital 1")
    ax.set_title("foxhunt-trainer: out of sample, agent (best validation checkpoint per seed)")
    ax.legend(fontsize="small", ncol=2)
    save(fig, path, summary)


def plot_her(rows, path):
    curves = defaultdict(list)
    for r in rows:
        curves[(r["her"], r["seed"])].append((int(r["step"]), float(r["success_rate"])))
    fig, ax = plt.subplots(figsize=(8, 5))
    summary = {}
    seeds = sorted({seed for _, seed in curves})
    for (her, seed), points in sorted(curves.items()):
        on = her == "1"
        ax.plot([p[0] for p in points], [p[1] for p in points],
                color="tab:green" if on else "tab:red", alpha=0.8,
                linestyle=("-", "--", ":", "-.")[seeds.index(seed) % 4],
                label="HER %s, seed %s" % ("on" if on else "off", seed))
        summary["her=%s seed=%s" % (her, seed)] = points[-1][1]
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("training step")
    ax.set_ylabel("success rate (greedy, fresh goals)")
    ax.set_title("bit flipping with foxhunt: hindsight experience replay on against off")
    ax.legend(fontsize="small")
    save(fig, path, summary)


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) == 2 else 2
    out = argv[1]
    jobs = [("learning_curve.csv", "learning_curve.png", plot_learning_curve),
            ("equity.csv", "equity.png", plot_equity),
            ("her_success.csv", "her_success.png", plot_her)]
    found = 0
    for csv_name, png_name, plot in jobs:
        src = os.path.join(out, csv_name)
        if os.path.exists(src):
            rows = read_csv(src)
            if rows:
                plot(rows, os.path.join(out, png_name))
                found += 1
    if not found:
        print("plot.py: no learning_curve.csv, equity.csv or her_success.csv in " + out,
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
