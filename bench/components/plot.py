#!/usr/bin/env python3
"""Table III as a bar chart: mean (bar), median (dot) and p99 (tick) per
operation, ns, log scale. Usage: plot.py table3.json table3.png"""
import json, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

rows = json.load(open(sys.argv[1]))
names = [r["op"] for r in rows]
mean = [r["mean_ns"] for r in rows]
p99 = [r["p99_ns"] for r in rows]
fig, ax = plt.subplots(figsize=(10, 0.45 * len(rows) + 1.5))
y = range(len(rows))
ax.barh(y, mean, color=["#888" if n.startswith("RPC") else "#3a7" for n in names])
ax.scatter(p99, y, marker="|", s=200, color="k", label="p99")
if all("median_ns" in r for r in rows):
    ax.scatter([r["median_ns"] for r in rows], y, marker="o", s=18, color="#c33", label="median")
ax.set_yticks(list(y))
ax.set_yticklabels(names, fontsize=8)
ax.invert_yaxis()
ax.set_xscale("log")
ax.set_xlabel("ns (log): bar = mean, dot = median, tick = p99")
ax.set_title("TMEM Table III on Linux (grey: RPC baselines, same run)")
ax.legend(loc="lower right")
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=120)
